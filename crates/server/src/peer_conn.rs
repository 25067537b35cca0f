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
}
