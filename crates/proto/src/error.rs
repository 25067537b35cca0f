//! ZooKeeper's error codes (`KeeperException.Code`).

/// An error code carried in `ReplyHeader.err` and multi results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum ErrorCode {
    Ok = 0,
    SystemError = -1,
    RuntimeInconsistency = -2,
    DataInconsistency = -3,
    ConnectionLoss = -4,
    MarshallingError = -5,
    Unimplemented = -6,
    OperationTimeout = -7,
    BadArguments = -8,
    UnknownSession = -12,
    NewConfigNoQuorum = -13,
    ReconfigInProgress = -14,
    ApiError = -100,
    NoNode = -101,
    NoAuth = -102,
    BadVersion = -103,
    NoChildrenForEphemerals = -108,
    NodeExists = -110,
    NotEmpty = -111,
    SessionExpired = -112,
    InvalidCallback = -113,
    InvalidAcl = -114,
    AuthFailed = -115,
    SessionMoved = -118,
    NotReadOnly = -119,
    EphemeralOnLocalSession = -120,
    NoWatcher = -121,
    RequestTimeout = -122,
    ReconfigDisabled = -123,
    SessionClosedRequireSaslAuth = -124,
    QuotaExceeded = -125,
    ThrottledOp = -127,
}

impl ErrorCode {
    pub fn code(self) -> i32 {
        self as i32
    }

    /// The code for a wire value, if it is one ZooKeeper defines.
    pub fn from_code(code: i32) -> Option<Self> {
        use ErrorCode::*;
        const ALL: [ErrorCode; 32] = [
            Ok,
            SystemError,
            RuntimeInconsistency,
            DataInconsistency,
            ConnectionLoss,
            MarshallingError,
            Unimplemented,
            OperationTimeout,
            BadArguments,
            UnknownSession,
            NewConfigNoQuorum,
            ReconfigInProgress,
            ApiError,
            NoNode,
            NoAuth,
            BadVersion,
            NoChildrenForEphemerals,
            NodeExists,
            NotEmpty,
            SessionExpired,
            InvalidCallback,
            InvalidAcl,
            AuthFailed,
            SessionMoved,
            NotReadOnly,
            EphemeralOnLocalSession,
            NoWatcher,
            RequestTimeout,
            ReconfigDisabled,
            SessionClosedRequireSaslAuth,
            QuotaExceeded,
            ThrottledOp,
        ];
        ALL.into_iter().find(|c| c.code() == code)
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?} ({})", self, self.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for c in -130..=1 {
            if let Some(e) = ErrorCode::from_code(c) {
                assert_eq!(e.code(), c);
            }
        }
        assert_eq!(ErrorCode::from_code(-101), Some(ErrorCode::NoNode));
        assert_eq!(ErrorCode::from_code(-9), None);
    }
}
