//! What the server-to-server connection shells (election port, quorum port) share.

use std::time::Duration;

/// Why a peer connection ended.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnEnd {
    #[error("peer closed the connection")]
    Closed,
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    #[error("write made no progress for {0:?}")]
    WriteTimeout(Duration),
    #[error("malformed input: {0}")]
    Malformed(String),
    #[error("closed by this server")]
    Killed,
    /// The task that consumes this connection's input (election driver, quorum consumer) is gone.
    #[error("the consumer is gone")]
    ConsumerGone,
    /// Leader: the txns of a DIFF could not be read from the on-disk log.
    #[error("DIFF from the on-disk txn log failed: {0}")]
    LogDiff(String),
}

/// Passes `stream` on unless it is connected to itself. On one host, a connect to a port in the
/// ephemeral range that nothing listens on yet can pick that same port as its source and connect
/// to itself (TCP simultaneous open); the peer dialled would then read its own packets, and the
/// socket would hold the port its owner is about to bind (a leader's quorum port, a server's
/// election port) until long after it closed. Such a stream is reset, which leaves nothing behind
/// on the port, and refused like a connection nobody answered.
pub(crate) fn refuse_self_connection(stream: tokio::net::TcpStream) -> std::io::Result<tokio::net::TcpStream> {
    let local = stream.local_addr()?;
    if local != stream.peer_addr()? {
        return Ok(stream);
    }
    let _ = stream.set_zero_linger();
    Err(std::io::Error::new(
        std::io::ErrorKind::ConnectionRefused,
        format!("connected to itself at {local}: nothing listens there yet"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::{TcpListener, TcpSocket};

    #[tokio::test]
    async fn a_self_connection_is_refused_and_leaves_the_port_free() {
        // A socket bound to a port and connected to that same port meets itself.
        let port = TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap().port();
        let addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
        let socket = TcpSocket::new_v4().unwrap();
        socket.set_reuseaddr(true).unwrap();
        socket.bind(addr).unwrap();
        let stream = socket.connect(addr).await.expect("a socket can connect to itself");
        assert_eq!(stream.local_addr().unwrap(), stream.peer_addr().unwrap());
        let err = refuse_self_connection(stream).expect_err("a self-connection is refused");
        assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused);
        // The port's owner can listen on it at once (the stream was reset, not left closing).
        let listener = TcpListener::bind(addr).await.expect("the port is free again");
        // And a real connection passes.
        let (dialled, accepted) = tokio::join!(tokio::net::TcpStream::connect(addr), listener.accept());
        let dialled = refuse_self_connection(dialled.unwrap()).expect("a connection to a listener passes");
        assert_eq!(dialled.local_addr().unwrap(), accepted.unwrap().1);
    }
}
