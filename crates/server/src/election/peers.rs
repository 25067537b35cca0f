//! The links to the other servers, by sid (`QuorumCnxManager`'s sender workers): one per
//! server of the start-up configuration, and one more for any server a reconfiguration makes a
//! member or that introduces itself on the election port from outside the configuration (a
//! server about to be added by a reconfig; ZooKeeper answers it too). The listener, the driver
//! and [`super::ElectionNet`] share it; the link tasks end at shutdown and are joined by
//! [`super::ElectionNet::stop`].

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use warden_quorum::Sid;

use super::conn::Received;
use super::link::{Link, LinkEvent, LinkSpec, LINK_EVENT_QUEUE};
use super::queue::{PeerQueue, SharedQueue};
use crate::sasl::quorum::QuorumSasl;
use crate::tls::peer::PeerTls;

/// A peer as the driver and the listener see it: its send queue and its link's event queue.
#[derive(Clone)]
pub(crate) struct PeerHandle {
    pub queue: SharedQueue,
    pub link: mpsc::Sender<LinkEvent>,
}

/// What every new link shares: this server's identity, TLS and SASL, the driver's inbox.
pub(crate) struct LinkFactory {
    pub my_sid: Sid,
    pub my_host: String,
    pub my_addr: String,
    pub tls: PeerTls,
    pub sasl: QuorumSasl,
    pub received: mpsc::Sender<Received>,
    pub shutdown: watch::Receiver<bool>,
}

pub(crate) struct Peers {
    factory: LinkFactory,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    handles: BTreeMap<Sid, PeerHandle>,
    tasks: JoinSet<()>,
}

impl Peers {
    pub(crate) fn new(factory: LinkFactory) -> Arc<Peers> {
        Arc::new(Peers { factory, inner: Mutex::new(Inner::default()) })
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding this lock leaves plain maps behind: still usable.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The link to `sid`, if there is one.
    pub(crate) fn get(&self, sid: Sid) -> Option<PeerHandle> {
        self.inner().handles.get(&sid).cloned()
    }

    /// The link to `sid` at `host:port`, started if there is none (an existing link keeps the
    /// address it was made with). Never for this server itself.
    pub(crate) fn ensure(&self, sid: Sid, host: &str, port: u16) -> Option<PeerHandle> {
        if sid == self.factory.my_sid {
            return None;
        }
        let mut inner = self.inner();
        if let Some(h) = inner.handles.get(&sid) {
            return Some(h.clone());
        }
        let f = &self.factory;
        let queue = Arc::new(PeerQueue::default());
        let (events_tx, events_rx) = mpsc::channel(LINK_EVENT_QUEUE);
        let spec =
            LinkSpec::new(f.my_sid, sid, (host, port), &f.my_host, f.my_addr.clone(), (f.tls.clone(), f.sasl.clone()));
        let link = Link::new(spec, queue.clone(), events_rx, f.received.clone(), f.shutdown.clone());
        inner.tasks.spawn(link.run());
        let handle = PeerHandle { queue, link: events_tx };
        inner.handles.insert(sid, handle.clone());
        tracing::debug!(sid, host, port, "election link started");
        Some(handle)
    }

    /// The link tasks, for joining at shutdown.
    pub(crate) fn take_tasks(&self) -> JoinSet<()> {
        std::mem::take(&mut self.inner().tasks)
    }
}
