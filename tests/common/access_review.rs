//! SubjectAccessReviews answered for kube-fake-client, which stores objects but authorizes
//! nothing: a create interceptor hands every `SubjectAccessReview` to [`AccessReviews::answer`],
//! which allows `get` on anything except what a test denied, and records each question.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

/// The API server's authorizer as far as the tests need one.
#[derive(Clone, Debug, Default)]
pub struct AccessReviews {
    /// `(user, resource, namespace/name)` that are denied.
    denied: Arc<Mutex<BTreeSet<(String, String, String)>>>,
    /// Every question asked: `user verb resource namespace/name`.
    asked: Arc<Mutex<Vec<String>>>,
}

impl AccessReviews {
    /// `user` may not `get` `resource` (`secrets`, `configmaps`) `namespace/name`.
    pub fn deny(&self, user: &str, resource: &str, namespace: &str, name: &str) {
        self.denied.lock().unwrap().insert((user.into(), resource.into(), format!("{namespace}/{name}")));
    }

    /// Every question asked so far.
    pub fn asked(&self) -> Vec<String> {
        self.asked.lock().unwrap().clone()
    }

    /// The answered review when `object` is a `SubjectAccessReview`, else `None` (the create goes
    /// on as usual).
    pub fn answer(&self, object: &Value) -> Option<Value> {
        if object.get("kind").and_then(Value::as_str) != Some("SubjectAccessReview") {
            return None;
        }
        let spec = object.get("spec").cloned().unwrap_or_default();
        let text = |value: &Value, key: &str| value.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
        let attributes = spec.get("resourceAttributes").cloned().unwrap_or_default();
        let user = text(&spec, "user");
        let resource = text(&attributes, "resource");
        let object_name = format!("{}/{}", text(&attributes, "namespace"), text(&attributes, "name"));
        self.asked.lock().unwrap().push(format!("{user} {} {resource} {object_name}", text(&attributes, "verb")));
        let allowed = !self.denied.lock().unwrap().contains(&(user, resource, object_name));
        let mut answered = object.clone();
        answered["status"] = json!({"allowed": allowed, "reason": if allowed { "allowed by the test" } else { "" }});
        Some(answered)
    }
}
