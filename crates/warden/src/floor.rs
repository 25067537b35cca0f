//! `warden floor`: the floor of a synchronous standalone write on this machine.
//!
//! A server that did no work at all would still, for each write of a synchronous client, receive the
//! request over loopback, append it to a file, fdatasync the file and send a reply. This measures
//! exactly that loop with a trivial server thread and a client thread in one process (1 KiB
//! requests, 100-byte replies, the file preallocated as Warden's transaction log is), so a real
//! server's synchronous write latency can be compared with it. Also printed: the same loop
//! without the fdatasync (the round trip alone), and fdatasync back to back with no round trip in
//! between, which on a virtual machine is faster than one that follows an idle wait.
//!
//! With `--server`, it also times synchronous 1 KiB setData requests against a real server, each
//! on an ephemeral node of its own, from two clients: a minimal blocking one (one connection, raw
//! protocol frames, no client library), which separates the server's latency from what a client
//! library adds, and the `zookeeper-client` crate driven as `warden bench` drives it. The rounds are
//! then split into segments, each timing the floor loop and both clients one after the other, so
//! that the three medians see the machine in the same states: on a shared virtual machine the
//! disk's latency drifts from one second to the next. The floor loop also runs alone before the
//! segments; interleaved it has measured slower than alone, so compare with the lower of the two.

use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::Serialize;
use warden_proto::request::{CreateRequest, SetDataRequest};
use warden_proto::{
    frame_with, Acl, ConnectRequest, OpCode, Reader, Record, ReplyHeader, RequestHeader, Writer, DEFAULT_MAX_BUFFER,
};
use zookeeper_client as zk;

use crate::bench;

const REQUEST: usize = 1024;
const REPLY: usize = 100;
/// Preallocated length of the probe file (Warden's and ZooKeeper's default log preallocation).
const PREALLOC: u64 = 64 << 20;

#[derive(clap::Args, Debug)]
pub struct FloorArgs {
    /// Directory for the probe file (put it on the file system the servers' data directories use).
    #[arg(long, default_value = ".")]
    dir: PathBuf,
    /// Round trips per measurement.
    #[arg(long, default_value_t = 2000)]
    rounds: usize,
    /// Also write the figures as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Also time synchronous setData requests against this server (`host:port`) with a minimal
    /// blocking client and with the `zookeeper-client` crate.
    #[arg(long)]
    server: Option<String>,
    /// With `--server`: segments the rounds are split into, each timing the floor loop and both
    /// clients in turn.
    #[arg(long, default_value_t = 10)]
    segments: usize,
}

/// Medians in milliseconds.
#[derive(Serialize, Debug)]
struct Floor {
    /// Request, reply, no disk.
    round_trip_ms: f64,
    /// Request, append + fdatasync, reply: the floor of a synchronous write.
    write_ms: f64,
    /// With `--server`: the floor loop run alone, before the segments.
    #[serde(skip_serializing_if = "Option::is_none")]
    write_alone_ms: Option<f64>,
    /// fdatasync after a 1 KiB append, back to back.
    fdatasync_back_to_back_ms: f64,
    /// With `--server`: a synchronous 1 KiB setData from a minimal blocking client.
    #[serde(skip_serializing_if = "Option::is_none")]
    server_set_data_ms: Option<f64>,
    /// With `--server`: a synchronous 1 KiB setData through the `zookeeper-client` crate.
    #[serde(skip_serializing_if = "Option::is_none")]
    client_set_data_ms: Option<f64>,
}

#[inline(never)]
pub fn run(args: FloorArgs) -> anyhow::Result<()> {
    let path = args.dir.join(format!("warden-floor.{}.probe", std::process::id()));
    let rounds = args.rounds.max(10);
    let segments = if args.server.is_some() { args.segments.clamp(1, rounds) } else { 1 };
    let result = measure(&path, rounds, segments, args.server.as_deref());
    let _ = std::fs::remove_file(&path);
    let floor = result?;
    println!("round trip (1 KiB request, 100 B reply), p50:           {:.3} ms", floor.round_trip_ms);
    println!("round trip with append + fdatasync (write floor), p50:  {:.3} ms", floor.write_ms);
    if let Some(ms) = floor.write_alone_ms {
        println!("the same, run alone before the segments, p50:           {ms:.3} ms");
    }
    println!("fdatasync after a 1 KiB append, back to back, p50:      {:.3} ms", floor.fdatasync_back_to_back_ms);
    if let Some(ms) = floor.server_set_data_ms {
        println!("setData 1 KiB from a minimal blocking client, p50:      {ms:.3} ms");
    }
    if let Some(ms) = floor.client_set_data_ms {
        println!("setData 1 KiB through zookeeper-client, p50:            {ms:.3} ms");
    }
    if let Some(json) = args.json {
        std::fs::write(&json, serde_json::to_string_pretty(&floor)?)
            .with_context(|| format!("writing {}", json.display()))?;
    }
    Ok(())
}

fn measure(path: &std::path::Path, rounds: usize, segments: usize, server: Option<&str>) -> anyhow::Result<Floor> {
    let round_trip_ms = median(round_trips(None, rounds)?);
    let file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    // Real zeros, as Warden writes ahead of its log records: appends then overwrite allocated
    // blocks, the cheapest fdatasync the file system offers.
    let zeros = vec![0u8; 1 << 20];
    for offset in (0..PREALLOC).step_by(zeros.len()) {
        file.write_all_at(&zeros, offset)?;
    }
    file.sync_all()?;
    let mut probes = match server {
        Some(server) => Some(Probes::open(server).with_context(|| format!("connecting to {server}"))?),
        None => None,
    };
    let mut offset = 0;
    // With a server, the floor loop also runs alone first: interleaved with the clients it has
    // measured up to a third slower on this VM (not from the segmenting, nor the order within a
    // segment; the server's own fdatasyncs in between remain), so compare with the lower of the two.
    let write_alone_ms = match probes {
        Some(_) => {
            let alone = median(round_trips(Some((&file, offset)), rounds)?);
            offset += (rounds * REQUEST) as u64;
            Some(alone)
        }
        None => None,
    };
    let per_segment = rounds / segments;
    let (mut writes, mut raw, mut client) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..segments {
        writes.extend(round_trips(Some((&file, offset)), per_segment)?);
        offset += (per_segment * REQUEST) as u64;
        if let Some(p) = &mut probes {
            raw.extend(p.raw_set_data(per_segment)?);
            client.extend(p.client_set_data(per_segment)?);
        }
    }
    if let Some(p) = probes {
        p.close()?;
    }
    let record = [b'x'; REQUEST];
    let mut syncs = Vec::with_capacity(rounds);
    for i in 0..rounds {
        file.write_all_at(&record, offset + (i * REQUEST) as u64)?;
        let t0 = Instant::now();
        file.sync_data()?;
        syncs.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    let server_set_data_ms = (!raw.is_empty()).then(|| median(raw));
    let client_set_data_ms = (!client.is_empty()).then(|| median(client));
    Ok(Floor {
        round_trip_ms,
        write_ms: median(writes),
        write_alone_ms,
        fdatasync_back_to_back_ms: median(syncs),
        server_set_data_ms,
        client_set_data_ms,
    })
}

/// Times of `rounds` synchronous round trips, in milliseconds; with `file`, the server appends each
/// request to it (from the offset given) and fdatasyncs before replying.
fn round_trips(file: Option<(&std::fs::File, u64)>, rounds: usize) -> anyhow::Result<Vec<f64>> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    std::thread::scope(|s| {
        let server = s.spawn(move || -> std::io::Result<()> {
            let (mut conn, _) = listener.accept()?;
            conn.set_nodelay(true)?;
            let mut request = [0u8; REQUEST];
            let reply = [b'y'; REPLY];
            for i in 0..rounds {
                conn.read_exact(&mut request)?;
                if let Some((f, offset)) = file {
                    f.write_all_at(&request, offset + (i * REQUEST) as u64)?;
                    f.sync_data()?;
                }
                conn.write_all(&reply)?;
            }
            Ok(())
        });
        let mut conn = TcpStream::connect(addr)?;
        conn.set_nodelay(true)?;
        let request = [b'x'; REQUEST];
        let mut reply = [0u8; REPLY];
        let mut times = Vec::with_capacity(rounds);
        for _ in 0..rounds {
            let t0 = Instant::now();
            conn.write_all(&request)?;
            conn.read_exact(&mut reply)?;
            times.push(t0.elapsed().as_secs_f64() * 1e3);
        }
        server.join().map_err(|_| anyhow::anyhow!("probe server panicked"))??;
        Ok(times)
    })
}

/// The two clients timed against a server, each with a session and an ephemeral node of its own
/// (so that nothing is left behind if the probe dies).
struct Probes {
    /// The minimal blocking client's connection, its next xid and its request.
    conn: TcpStream,
    xid: i32,
    set: SetDataRequest,
    client: zk::Client,
    client_path: String,
    value: Vec<u8>,
}

impl Probes {
    fn open(server: &str) -> anyhow::Result<Probes> {
        let mut conn = TcpStream::connect(server)?;
        conn.set_nodelay(true)?;
        let hello = ConnectRequest { timeout_ms: 10_000, passwd: vec![0; 16], ..ConnectRequest::default() };
        conn.write_all(&frame_with(|w| hello.encode(w)))?;
        read_frame(&mut conn)?;
        let path = format!("/warden-floor-{}", std::process::id());
        let value = vec![b'x'; REQUEST];
        let create = CreateRequest {
            path: path.clone(),
            data: Some(value.clone()),
            acl: Acl::open_unsafe(),
            flags: 1, // ephemeral
        };
        call(&mut conn, 1, OpCode::Create, |w| create.encode(w))?;
        let set = SetDataRequest { path: path.clone(), data: Some(value.clone().into()), version: -1 };
        let client_path = format!("{path}-client");
        let client = bench::block_on(async {
            let client = zk::Client::connector().with_session_timeout(Duration::from_secs(10)).connect(server).await?;
            let ephemeral = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
            client.create(&client_path, &value, &ephemeral).await?;
            anyhow::Ok(client)
        })?;
        Ok(Probes { conn, xid: 2, set, client, client_path, value })
    }

    /// Times of `rounds` synchronous setData requests from the minimal blocking client.
    fn raw_set_data(&mut self, rounds: usize) -> anyhow::Result<Vec<f64>> {
        let mut times = Vec::with_capacity(rounds);
        for _ in 0..rounds {
            let t0 = Instant::now();
            call(&mut self.conn, self.xid, OpCode::SetData, |w| self.set.encode(w))?;
            times.push(t0.elapsed().as_secs_f64() * 1e3);
            self.xid += 1;
        }
        Ok(times)
    }

    /// Times of `rounds` synchronous setData requests through `zookeeper-client`, on the executor
    /// `warden bench` uses.
    fn client_set_data(&self, rounds: usize) -> anyhow::Result<Vec<f64>> {
        bench::block_on(async {
            let mut times = Vec::with_capacity(rounds);
            for _ in 0..rounds {
                let t0 = Instant::now();
                self.client.set_data(&self.client_path, &self.value, None).await?;
                times.push(t0.elapsed().as_secs_f64() * 1e3);
            }
            Ok(times)
        })
    }

    /// Closes the blocking client's session, which removes its node, and deletes the other
    /// client's node (that session ends with the process).
    fn close(mut self) -> anyhow::Result<()> {
        call(&mut self.conn, self.xid, OpCode::CloseSession, |_| {})?;
        bench::block_on(self.client.delete(&self.client_path, None))?;
        Ok(())
    }
}

/// Sends one request and waits for its reply; Err if the server answers with an error code.
fn call(conn: &mut TcpStream, xid: i32, op: OpCode, body: impl FnOnce(&mut Writer)) -> anyhow::Result<()> {
    conn.write_all(&frame_with(|w| {
        RequestHeader { xid, op_type: op as i32 }.encode(w);
        body(w);
    }))?;
    loop {
        let reply = read_frame(conn)?;
        let hdr = ReplyHeader::decode(&mut Reader::new(&reply))?;
        if hdr.xid != xid {
            continue; // a notification
        }
        if hdr.err != 0 {
            bail!("{op:?} failed with error {}", hdr.err);
        }
        return Ok(());
    }
}

fn read_frame(conn: &mut TcpStream) -> anyhow::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    conn.read_exact(&mut len)?;
    let len = usize::try_from(i32::from_be_bytes(len)).context("negative frame length")?;
    if len > DEFAULT_MAX_BUFFER {
        bail!("frame of {len} bytes, above jute.maxbuffer");
    }
    let mut frame = vec![0; len];
    conn.read_exact(&mut frame)?;
    Ok(frame)
}

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
