//! The Secrets of a registration's namespace as one reconcile reads them: each is fetched from
//! the API server once, however many steps need it (credentials, webhook token, GitLab).

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::Api;

/// Reading a Secret failed.
#[derive(Debug, thiserror::Error)]
#[error("reading Secret {name}: {source}")]
pub struct ReadError {
    /// `namespace/name`.
    pub name: String,
    /// The API error.
    #[source]
    pub source: kube::Error,
}

/// The Secrets of the registration's namespace as read during one reconcile: each is fetched
/// from the API server once, however many steps need it (credentials, webhook token, GitLab).
pub struct SecretReads {
    client: Client,
    namespace: String,
    read: std::sync::Mutex<BTreeMap<String, Option<Secret>>>,
}

impl SecretReads {
    /// Nothing read yet from `namespace`.
    pub fn new(client: &Client, namespace: &str) -> Self {
        SecretReads { client: client.clone(), namespace: namespace.to_owned(), read: Default::default() }
    }

    /// Secret `name`, read once.
    pub async fn get(&self, name: &str) -> Result<Option<Secret>, ReadError> {
        if let Some(read) = self.read.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(name) {
            return Ok(read.clone());
        }
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &self.namespace);
        let secret = api
            .get_opt(name)
            .await
            .map_err(|source| ReadError { name: format!("{}/{name}", self.namespace), source })?;
        self.read.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(name.to_owned(), secret.clone());
        Ok(secret)
    }

    /// The data of Secret `name`, read once.
    pub async fn data(&self, name: &str) -> Result<Option<BTreeMap<String, ByteString>>, ReadError> {
        Ok(self.get(name).await?.map(|s| s.data.unwrap_or_default()))
    }

    /// Forgets Secret `name` after this reconcile wrote it, so the next step reads what was written.
    pub fn forget(&self, name: &str) {
        self.read.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(name);
    }
}
