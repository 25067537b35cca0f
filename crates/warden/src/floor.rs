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
//! With `--server`, it also runs that loop against a real server with a minimal blocking client
//! (one connection, raw protocol frames, no client library): synchronous 1 KiB setData requests on
//! a node of its own, created first and deleted after. That separates the server's latency from
//! what a client library adds.

use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context};
use serde::Serialize;
use warden_proto::request::{CreateRequest, PathVersion, SetDataRequest};
use warden_proto::{
    frame_with, Acl, ConnectRequest, OpCode, Reader, Record, ReplyHeader, RequestHeader, Writer, DEFAULT_MAX_BUFFER,
};

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
    /// blocking client.
    #[arg(long)]
    server: Option<String>,
}

/// Medians in milliseconds.
#[derive(Serialize, Debug)]
struct Floor {
    /// Request, reply, no disk.
    round_trip_ms: f64,
    /// Request, append + fdatasync, reply: the floor of a synchronous write.
    write_ms: f64,
    /// fdatasync after a 1 KiB append, back to back.
    fdatasync_back_to_back_ms: f64,
    /// With `--server`: a synchronous 1 KiB setData from a minimal blocking client.
    #[serde(skip_serializing_if = "Option::is_none")]
    server_set_data_ms: Option<f64>,
}

#[inline(never)]
pub fn run(args: FloorArgs) -> anyhow::Result<()> {
    let path = args.dir.join(format!("warden-floor.{}.probe", std::process::id()));
    let rounds = args.rounds.max(10);
    let result = measure(&path, rounds);
    let _ = std::fs::remove_file(&path);
    let mut floor = result?;
    if let Some(server) = &args.server {
        floor.server_set_data_ms =
            Some(raw_set_data(server, rounds).with_context(|| format!("synchronous setData against {server}"))?);
    }
    println!("round trip (1 KiB request, 100 B reply), p50:           {:.3} ms", floor.round_trip_ms);
    println!("round trip with append + fdatasync (write floor), p50:  {:.3} ms", floor.write_ms);
    println!("fdatasync after a 1 KiB append, back to back, p50:      {:.3} ms", floor.fdatasync_back_to_back_ms);
    if let Some(ms) = floor.server_set_data_ms {
        println!("setData 1 KiB from a minimal blocking client, p50:      {ms:.3} ms");
    }
    if let Some(json) = args.json {
        std::fs::write(&json, serde_json::to_string_pretty(&floor)?)
            .with_context(|| format!("writing {}", json.display()))?;
    }
    Ok(())
}

fn measure(path: &std::path::Path, rounds: usize) -> anyhow::Result<Floor> {
    let round_trip_ms = round_trips(None, rounds)?;
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
    let write_ms = round_trips(Some(&file), rounds)?;
    let record = [b'x'; REQUEST];
    let mut syncs = Vec::with_capacity(rounds);
    let base = (rounds * REQUEST) as u64;
    for i in 0..rounds {
        file.write_all_at(&record, base + (i * REQUEST) as u64)?;
        let t0 = Instant::now();
        file.sync_data()?;
        syncs.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    Ok(Floor { round_trip_ms, write_ms, fdatasync_back_to_back_ms: median(syncs), server_set_data_ms: None })
}

/// Median of `rounds` synchronous round trips; with `file`, the server appends each request to it
/// and fdatasyncs before replying.
fn round_trips(file: Option<&std::fs::File>, rounds: usize) -> anyhow::Result<f64> {
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
                if let Some(f) = file {
                    f.write_all_at(&request, (i * REQUEST) as u64)?;
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
        Ok(median(times))
    })
}

/// Median of `rounds` synchronous setData requests (1 KiB) on a node of this probe's own, over one
/// session with blocking sockets; the node is created first and deleted, and the session closed,
/// after.
fn raw_set_data(addr: &str, rounds: usize) -> anyhow::Result<f64> {
    let mut conn = TcpStream::connect(addr)?;
    conn.set_nodelay(true)?;
    let hello = ConnectRequest { timeout_ms: 10_000, passwd: vec![0; 16], ..ConnectRequest::default() };
    conn.write_all(&frame_with(|w| hello.encode(w)))?;
    read_frame(&mut conn)?;
    let path = format!("/warden-floor-{}", std::process::id());
    let value = vec![b'x'; REQUEST];
    let create = CreateRequest { path: path.clone(), data: Some(value.clone()), acl: Acl::open_unsafe(), flags: 0 };
    call(&mut conn, 1, OpCode::Create, |w| create.encode(w))?;
    let set = SetDataRequest { path: path.clone(), data: Some(value), version: -1 };
    let mut times = Vec::with_capacity(rounds);
    for xid in 2..rounds as i32 + 2 {
        let t0 = Instant::now();
        call(&mut conn, xid, OpCode::SetData, |w| set.encode(w))?;
        times.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    let delete = PathVersion { path, version: -1 };
    call(&mut conn, rounds as i32 + 2, OpCode::Delete, |w| delete.encode(w))?;
    call(&mut conn, rounds as i32 + 3, OpCode::CloseSession, |_| {})?;
    Ok(median(times))
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

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
