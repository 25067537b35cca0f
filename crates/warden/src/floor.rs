//! `warden floor`: the floor of a synchronous standalone write on this machine.
//!
//! A server that did no work at all would still, for each write of a synchronous client, receive the
//! request over loopback, append it to a file, fdatasync the file and send a reply. This measures
//! exactly that loop with a trivial server thread and a client thread in one process (1 KiB
//! requests, 100-byte replies, the file preallocated as Warden's transaction log is), so a real
//! server's synchronous write latency can be compared with it. Also printed: the same loop
//! without the fdatasync (the round trip alone), and fdatasync back to back with no round trip in
//! between, which on a virtual machine is faster than one that follows an idle wait.

use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use serde::Serialize;

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
}

pub fn run(args: FloorArgs) -> anyhow::Result<()> {
    let path = args.dir.join(format!("warden-floor.{}.probe", std::process::id()));
    let result = measure(&path, args.rounds.max(10));
    let _ = std::fs::remove_file(&path);
    let floor = result?;
    println!("round trip (1 KiB request, 100 B reply), p50:           {:.3} ms", floor.round_trip_ms);
    println!("round trip with append + fdatasync (write floor), p50:  {:.3} ms", floor.write_ms);
    println!("fdatasync after a 1 KiB append, back to back, p50:      {:.3} ms", floor.fdatasync_back_to_back_ms);
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
    file.set_len(PREALLOC)?;
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
    Ok(Floor { round_trip_ms, write_ms, fdatasync_back_to_back_ms: median(syncs) })
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

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
