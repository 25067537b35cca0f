//! Linearizable reads (`NodeConfig::linearizable_reads`, a Warden setting): in an ensemble, a
//! data read waits for a read barrier, a sync of this server's own that started after the read
//! arrived. The barrier goes through the same path as a client's sync (a learner forwards it, the
//! leader confirms with a quorum that it still leads; `Leader::sync`), so when it passes, this
//! server has applied every write acknowledged to anyone before the read arrived, and the read
//! answers from the tree then. One barrier is out at a time; reads arriving while it is out share
//! the next, issued when it passes, so a busy server confirms many reads per round trip.

use super::*;

/// A sync of this server waiting for the leader (`Quorum::syncs`), answered in order.
#[derive(Debug)]
pub(crate) enum SyncWaiter {
    /// A client's sync: its reply.
    Client { conn: ConnId, xid: i32, path: String },
    /// A read barrier: the reads waiting for it.
    Barrier(u64),
}

/// The read barriers of one role.
#[derive(Debug, Default)]
pub(crate) struct Barriers {
    /// The last barrier issued and the last one passed (ids grow for the node's lifetime).
    issued: u64,
    passed: u64,
    /// Reads arrived since the last barrier was issued: they need the next one.
    want_next: bool,
    /// Connections with a read waiting for a barrier.
    waiting: BTreeSet<ConnId>,
}

impl Barriers {
    /// A new role: barriers out under the old one will never pass; their reads went with the
    /// connections the role change closed.
    pub(crate) fn reset(&mut self) {
        self.passed = self.issued;
        self.want_next = false;
        self.waiting.clear();
    }

    fn in_flight(&self) -> bool {
        self.issued > self.passed
    }

    /// At most one barrier out, and `syncs` holds exactly the ones out.
    pub(crate) fn check_invariants(&self, syncs: &VecDeque<SyncWaiter>) -> Result<(), String> {
        let out = syncs.iter().filter(|w| matches!(w, SyncWaiter::Barrier(_))).count() as u64;
        ensure!(self.passed <= self.issued, "read barrier {} passed but only {} issued", self.passed, self.issued);
        ensure!(
            self.issued - self.passed == out,
            "{out} barriers wait, {} issued and not passed",
            self.issued - self.passed
        );
        ensure!(out <= 1, "{out} read barriers out at once");
        Ok(())
    }
}

/// Reads that wait for a barrier: those that return data a write can change.
fn gated(req: &Request) -> bool {
    matches!(
        req,
        Request::Exists(_)
            | Request::GetData(_)
            | Request::GetChildren(_)
            | Request::GetChildren2(_)
            | Request::GetAcl(_)
            | Request::GetAllChildrenNumber(_)
            | Request::GetEphemerals(_)
            | Request::MultiRead(_)
    )
}

impl Node {
    /// The barrier a read arriving now must wait for (0: none).
    pub(crate) fn read_barrier(&mut self, conn: ConnId, req: &Request, out: &mut Vec<Output>) -> u64 {
        if !self.cfg.linearizable_reads || !gated(req) || self.in_read_only_role() {
            return 0;
        }
        let Mode::Ensemble(q) = &mut self.mode else { return 0 };
        q.barriers.waiting.insert(conn);
        if q.barriers.in_flight() {
            q.barriers.want_next = true;
            return q.barriers.issued + 1;
        }
        self.issue_barrier(out)
    }

    /// The last read barrier passed: a read waiting for a later one may not run yet.
    pub(crate) fn barriers_passed(&self) -> u64 {
        self.ensemble().map_or(u64::MAX, |q| q.barriers.passed)
    }

    fn issue_barrier(&mut self, out: &mut Vec<Output>) -> u64 {
        let q = self.ensemble_mut();
        q.barriers.issued += 1;
        q.barriers.want_next = false;
        let id = q.barriers.issued;
        q.syncs.push_back(SyncWaiter::Barrier(id));
        let me = q.setup.my_sid;
        match &q.machine {
            Machine::Leader(_) => self.leader_machine_sync(me, out),
            Machine::Learner(_) => {
                let request = codec::ForwardedRequest {
                    session_id: 0,
                    cxid: 0,
                    op_type: OpCode::Sync.code(),
                    request: Vec::new(),
                    authinfo: Vec::new(),
                };
                self.forward(request, None, out);
            }
            Machine::Looking => {}
        }
        id
    }

    /// Barrier `id` passed: the reads waiting for it run, and the next barrier goes out for the
    /// reads that arrived meanwhile.
    pub(super) fn barrier_done(&mut self, id: u64, out: &mut Vec<Output>) {
        let q = self.ensemble_mut();
        q.barriers.passed = q.barriers.passed.max(id);
        let waiting = std::mem::take(&mut q.barriers.waiting);
        for conn in waiting {
            self.drain(conn, out);
            let still = self
                .conns
                .get(&conn)
                .is_some_and(|c| c.queue.iter().any(|p| matches!(p, Pending::Read { barrier, .. } if *barrier > id)));
            if still {
                self.ensemble_mut().barriers.waiting.insert(conn);
            }
        }
        if self.ensemble_mut().barriers.want_next {
            self.issue_barrier(out);
        }
    }
}
