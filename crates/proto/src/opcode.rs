//! Operation codes (`ZooDefs.OpCode`) and special xids (`ClientCnxn`'s reserved negative xids).

/// A request or txn type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum OpCode {
    Notification = 0,
    Create = 1,
    Delete = 2,
    Exists = 3,
    GetData = 4,
    SetData = 5,
    GetAcl = 6,
    SetAcl = 7,
    GetChildren = 8,
    Sync = 9,
    Ping = 11,
    GetChildren2 = 12,
    Check = 13,
    Multi = 14,
    Create2 = 15,
    Reconfig = 16,
    CheckWatches = 17,
    RemoveWatches = 18,
    CreateContainer = 19,
    DeleteContainer = 20,
    CreateTtl = 21,
    MultiRead = 22,
    Auth = 100,
    SetWatches = 101,
    Sasl = 102,
    GetEphemerals = 103,
    GetAllChildrenNumber = 104,
    SetWatches2 = 105,
    AddWatch = 106,
    WhoAmI = 107,
    CreateSession = -10,
    CloseSession = -11,
    Error = -1,
}

impl OpCode {
    pub fn code(self) -> i32 {
        self as i32
    }

    pub fn from_code(code: i32) -> Option<Self> {
        use OpCode::*;
        const ALL: [OpCode; 33] = [
            Notification,
            Create,
            Delete,
            Exists,
            GetData,
            SetData,
            GetAcl,
            SetAcl,
            GetChildren,
            Sync,
            Ping,
            GetChildren2,
            Check,
            Multi,
            Create2,
            Reconfig,
            CheckWatches,
            RemoveWatches,
            CreateContainer,
            DeleteContainer,
            CreateTtl,
            MultiRead,
            Auth,
            SetWatches,
            Sasl,
            GetEphemerals,
            GetAllChildrenNumber,
            SetWatches2,
            AddWatch,
            WhoAmI,
            CreateSession,
            CloseSession,
            Error,
        ];
        ALL.into_iter().find(|c| c.code() == code)
    }
}

/// Reserved xids.
pub mod xid {
    pub const NOTIFICATION: i32 = -1;
    pub const PING: i32 = -2;
    pub const AUTH: i32 = -4;
    pub const SET_WATCHES: i32 = -8;
}
