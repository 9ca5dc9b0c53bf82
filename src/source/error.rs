//! Why a fetch failed, classified for the controller, with messages that never hold a secret.

use std::fmt;

use crate::api::conditions;
use crate::error::{Class, Classify, Reason};

/// What went wrong, as the controller's conditions name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FailureKind {
    /// The server refused the key or token, or the key could not be used.
    AuthenticationFailed,
    /// The server's SSH host key is not the one in `known_hosts`.
    HostKeyMismatch,
    /// `known_hosts` has no entry for the server.
    HostKeyUnknown,
    /// The HTTPS certificate is not trusted by the configured CA bundle.
    CertificateInvalid,
    /// The branch, tag or commit does not exist on the remote.
    RefNotFound,
    /// The server could not be reached, or the connection broke.
    Unreachable,
    /// The operation took longer than its timeout.
    Timeout,
    /// The fetch received more bytes than its limit (the pack).
    TooLarge,
    /// The checked-out tree would exceed a bound: its bytes, one file's bytes or its entries.
    SnapshotTooLarge,
    /// The registration's cache (repository and snapshots) would exceed its budget.
    CacheTooLarge,
    /// The tree holds an entry that cannot be checked out safely (a duplicate name, a name such
    /// as `..`, an odd mode, a symlink target that is not text); the message names the path.
    UnsafeTree,
    /// The server redirected to another origin (scheme, host or port), where credentials are
    /// never sent.
    RedirectRefused,
    /// The local cache was damaged; it is discarded and cloned afresh.
    CorruptCache,
    /// The request itself is wrong (scheme, ref name, path).
    InvalidRequest,
    /// Anything else libgit2 reported.
    Other,
}

impl FailureKind {
    /// Every kind, for what lists them all (the condition vocabulary, the tenant's texts).
    pub const ALL: [FailureKind; 15] = [
        FailureKind::AuthenticationFailed,
        FailureKind::HostKeyMismatch,
        FailureKind::HostKeyUnknown,
        FailureKind::CertificateInvalid,
        FailureKind::RefNotFound,
        FailureKind::Unreachable,
        FailureKind::Timeout,
        FailureKind::TooLarge,
        FailureKind::SnapshotTooLarge,
        FailureKind::CacheTooLarge,
        FailureKind::UnsafeTree,
        FailureKind::RedirectRefused,
        FailureKind::CorruptCache,
        FailureKind::InvalidRequest,
        FailureKind::Other,
    ];

    /// The class that decides the condition and the requeue.
    pub fn class(self) -> Class {
        match self {
            FailureKind::AuthenticationFailed
            | FailureKind::HostKeyMismatch
            | FailureKind::HostKeyUnknown
            | FailureKind::CertificateInvalid
            | FailureKind::TooLarge
            | FailureKind::SnapshotTooLarge
            | FailureKind::CacheTooLarge
            | FailureKind::UnsafeTree
            | FailureKind::RedirectRefused
            | FailureKind::InvalidRequest => Class::Stalled,
            FailureKind::RefNotFound => Class::Waiting,
            FailureKind::Unreachable | FailureKind::Timeout | FailureKind::CorruptCache | FailureKind::Other => {
                Class::Transient
            }
        }
    }

    /// The condition reason, e.g. `AuthenticationFailed` (one of [`conditions::FETCH_REASONS`]).
    pub fn reason(self) -> &'static str {
        match self {
            FailureKind::AuthenticationFailed => conditions::REASON_AUTHENTICATION_FAILED,
            FailureKind::HostKeyMismatch => conditions::REASON_HOST_KEY_MISMATCH,
            FailureKind::HostKeyUnknown => conditions::REASON_HOST_KEY_UNKNOWN,
            FailureKind::CertificateInvalid => conditions::REASON_CERTIFICATE_INVALID,
            FailureKind::RefNotFound => conditions::REASON_REF_NOT_FOUND,
            FailureKind::Unreachable => conditions::REASON_UNREACHABLE,
            FailureKind::Timeout => conditions::REASON_TIMEOUT,
            FailureKind::TooLarge => conditions::REASON_TOO_LARGE,
            FailureKind::SnapshotTooLarge => conditions::REASON_SNAPSHOT_TOO_LARGE,
            FailureKind::CacheTooLarge => conditions::REASON_CACHE_TOO_LARGE,
            FailureKind::UnsafeTree => conditions::REASON_UNSAFE_TREE,
            FailureKind::RedirectRefused => conditions::REASON_REDIRECT_REFUSED,
            FailureKind::CorruptCache => conditions::REASON_CORRUPT_CACHE,
            FailureKind::InvalidRequest => conditions::REASON_INVALID_REQUEST,
            FailureKind::Other => conditions::REASON_GIT_ERROR,
        }
    }
}

/// A failed fetch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceError {
    /// What went wrong.
    pub kind: FailureKind,
    /// What happened and what to do, free of credentials.
    pub message: String,
}

impl SourceError {
    /// A failure of `kind`.
    pub fn new(kind: FailureKind, message: impl Into<String>) -> Self {
        SourceError { kind, message: message.into() }
    }
}

impl fmt::Display for SourceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind.reason(), self.message)
    }
}

impl std::error::Error for SourceError {}

impl Classify for SourceError {
    fn class(&self) -> Class {
        self.kind.class()
    }
}

impl Reason for SourceError {
    fn reason(&self) -> &'static str {
        self.kind.reason()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_configuration_problems_stall() {
        assert_eq!(FailureKind::AuthenticationFailed.class(), Class::Stalled);
        assert_eq!(FailureKind::Timeout.class(), Class::Transient);
        assert_eq!(FailureKind::RefNotFound.class(), Class::Waiting);
    }
}
