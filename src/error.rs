//! The one failure model of the controller (Flux's classes): every error that crosses a module
//! boundary (a fetch, a GitLab call, an API request, a write) says which [`Class`] it is through
//! [`Classify`], and [`Schedule::settle`] turns a class into what the reconciler reports and when
//! it comes back. Both reconcilers, the GitLab step and both error policies go through here, so
//! the condition and the requeue always tell the same story. An error that ends in a condition
//! also names its reason ([`Reason`]).

use std::time::Duration;

/// How a failure is handled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Class {
    /// Someone must change the spec, a Secret, the policy or the cluster: retrying unchanged
    /// will not help (`Stalled=True`, a long resync as a safety net).
    Stalled,
    /// Something else must happen first (a branch pushed, a Secret created, a permission
    /// granted): retry at the object's own pace (`Reconciling=True`).
    Waiting,
    /// Passing trouble (a timeout, a 5xx, a conflict): retry soon (`Reconciling=True`).
    Transient,
}

/// An error that knows its [`Class`].
pub trait Classify {
    /// The class that decides the condition and the requeue.
    fn class(&self) -> Class;
}

impl Classify for kube::Error {
    fn class(&self) -> Class {
        match self {
            // The object was refused as invalid: sending it again unchanged cannot help.
            kube::Error::Api(status) if status.code == 400 || status.code == 422 => Class::Stalled,
            // Missing permissions, or a kind that is not installed: waiting for the platform.
            kube::Error::Api(status) if status.code == 403 || status.code == 404 => Class::Waiting,
            _ => Class::Transient,
        }
    }
}

/// An error that ends in a condition and knows its reason, as it knows its [`Class`]: one of
/// [`crate::api::conditions`]'s.
pub trait Reason {
    /// The condition reason, e.g. `AuthenticationFailed` or `GitLabNotMaintainer`.
    fn reason(&self) -> &'static str;
}

/// When a reconciler comes back after a failure of each class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// After a [`Class::Stalled`] failure.
    pub stalled: Duration,
    /// After a [`Class::Waiting`] failure.
    pub waiting: Duration,
    /// After a [`Class::Transient`] failure.
    pub transient: Duration,
}

/// What a failure of some class comes to: the condition to report and the requeue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settled {
    /// `Stalled=True` (a person must act) rather than `Reconciling=True`.
    pub stalled: bool,
    /// When to reconcile again.
    pub requeue: Duration,
}

impl Schedule {
    /// The one mapping from a class to the condition and the requeue.
    pub fn settle(&self, class: Class) -> Settled {
        match class {
            Class::Stalled => Settled { stalled: true, requeue: self.stalled },
            Class::Waiting => Settled { stalled: false, requeue: self.waiting },
            Class::Transient => Settled { stalled: false, requeue: self.transient },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16) -> kube::Error {
        kube::Error::Api(kube::core::Status::failure("refused", "Refused").with_code(code).boxed())
    }

    #[test]
    fn invalid_objects_stall_missing_rights_wait_and_the_rest_is_transient() {
        assert_eq!(api(422).class(), Class::Stalled);
        assert_eq!(api(400).class(), Class::Stalled);
        assert_eq!(api(403).class(), Class::Waiting);
        assert_eq!(api(404).class(), Class::Waiting);
        assert_eq!(api(409).class(), Class::Transient);
        assert_eq!(api(503).class(), Class::Transient);
    }

    #[test]
    fn only_a_stalled_class_reports_stalled_and_each_class_takes_its_own_requeue() {
        let schedule = Schedule {
            stalled: Duration::from_secs(3600),
            waiting: Duration::from_secs(30),
            transient: Duration::from_secs(15),
        };
        assert_eq!(schedule.settle(Class::Stalled), Settled { stalled: true, requeue: Duration::from_secs(3600) });
        assert_eq!(schedule.settle(Class::Waiting), Settled { stalled: false, requeue: Duration::from_secs(30) });
        assert_eq!(schedule.settle(Class::Transient), Settled { stalled: false, requeue: Duration::from_secs(15) });
    }
}
