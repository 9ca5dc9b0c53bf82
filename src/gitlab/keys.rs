//! Deploy key pairs: ed25519 generation into the Secret keys the Git source reads (`identity`,
//! `identity.pub`), and the SHA-256 fingerprint GitLab lists keys by.

use std::collections::BTreeMap;
use std::fmt;

use ssh_key::rand_core::OsRng;
use ssh_key::{Algorithm, HashAlg, LineEnding, PrivateKey, PublicKey};

/// Secret key of the OpenSSH private key (Flux's name, read by the Git source).
pub const IDENTITY: &str = "identity";
/// Secret key of the public key, one OpenSSH line.
pub const IDENTITY_PUB: &str = "identity.pub";
/// Secret key of the pinned host keys of the GitLab SSH server.
pub const KNOWN_HOSTS: &str = "known_hosts";

/// A freshly generated key pair. `Debug` never shows the private key.
#[derive(Clone, PartialEq, Eq)]
pub struct KeyPair {
    /// The private key in OpenSSH format (`-----BEGIN OPENSSH PRIVATE KEY-----`), unencrypted.
    pub private_openssh: String,
    /// The public key as one line: `ssh-ed25519 AAAA... <comment>`.
    pub public_openssh: String,
    /// `SHA256:<unpadded base64>`, as `ssh-keygen -lf` and GitLab's `fingerprint_sha256` show it.
    pub fingerprint: String,
}

impl fmt::Debug for KeyPair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyPair")
            .field("private_openssh", &"***")
            .field("public_openssh", &self.public_openssh)
            .field("fingerprint", &self.fingerprint)
            .finish()
    }
}

impl KeyPair {
    /// The Secret data of a registration holding this pair and the platform's `known_hosts` for
    /// the GitLab host (never learnt from the server: there is no trust on first use).
    pub fn secret_data(&self, known_hosts: &str) -> BTreeMap<String, String> {
        BTreeMap::from([
            (IDENTITY.to_owned(), self.private_openssh.clone()),
            (IDENTITY_PUB.to_owned(), format!("{}\n", self.public_openssh)),
            (KNOWN_HOSTS.to_owned(), known_hosts.to_owned()),
        ])
    }
}

/// Why a key could not be generated or read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct KeyError(String);

/// Generates an ed25519 key pair from the operating system's random source; `comment` ends the
/// public key line (e.g. `cdtarget:platform/team-a-app`).
pub fn generate(comment: &str) -> Result<KeyPair, KeyError> {
    let mut private = PrivateKey::random(&mut OsRng, Algorithm::Ed25519)
        .map_err(|e| KeyError(format!("cannot generate an ed25519 key: {e}")))?;
    private.set_comment(comment);
    let private_openssh = private
        .to_openssh(LineEnding::LF)
        .map_err(|e| KeyError(format!("cannot encode the private key: {e}")))?
        .to_string();
    let public = private.public_key();
    let public_openssh = public.to_openssh().map_err(|e| KeyError(format!("cannot encode the public key: {e}")))?;
    Ok(KeyPair { private_openssh, fingerprint: public.fingerprint(HashAlg::Sha256).to_string(), public_openssh })
}

/// The public key line of an OpenSSH private key (for a Secret that has `identity` but no
/// `identity.pub`). Encrypted keys are refused: the controller could not use them unattended.
pub(crate) fn public_key_of(private_openssh: &str) -> Result<String, KeyError> {
    let private = PrivateKey::from_openssh(private_openssh.trim())
        .map_err(|e| KeyError(format!("`{IDENTITY}` is not an OpenSSH private key: {e}")))?;
    if private.is_encrypted() {
        return Err(KeyError(format!("`{IDENTITY}` is encrypted; the deploy key must be usable without a passphrase")));
    }
    private.public_key().to_openssh().map_err(|e| KeyError(format!("cannot encode the public key: {e}")))
}

/// `SHA256:<unpadded base64 of SHA-256(key blob)>` of an OpenSSH public key line; the comment and
/// surrounding whitespace do not matter.
pub fn fingerprint(public_openssh: &str) -> Result<String, KeyError> {
    let public = PublicKey::from_openssh(public_openssh.trim())
        .map_err(|e| KeyError(format!("not an OpenSSH public key (expected `ssh-ed25519 AAAA... comment`): {e}")))?;
    Ok(public.fingerprint(HashAlg::Sha256).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_pair_is_ed25519_with_matching_fingerprint() {
        let pair = generate("cdtarget:platform/app").unwrap();
        assert!(pair.public_openssh.starts_with("ssh-ed25519 AAAA"), "{}", pair.public_openssh);
        assert!(pair.public_openssh.ends_with(" cdtarget:platform/app"));
        assert!(pair.private_openssh.starts_with("-----BEGIN OPENSSH PRIVATE KEY-----\n"));
        assert!(pair.fingerprint.starts_with("SHA256:") && !pair.fingerprint.ends_with('='));
        assert_eq!(fingerprint(&pair.public_openssh).unwrap(), pair.fingerprint);
        assert_eq!(public_key_of(&pair.private_openssh).unwrap(), pair.public_openssh);
        assert_ne!(generate("x").unwrap().fingerprint, pair.fingerprint, "every pair is new");
    }

    #[test]
    fn fingerprint_ignores_comment_and_whitespace() {
        let pair = generate("one").unwrap();
        let body = pair.public_openssh.rsplit_once(' ').unwrap().0;
        assert_eq!(fingerprint(&format!("  {body} other comment\n")).unwrap(), pair.fingerprint);
        assert_eq!(fingerprint(body).unwrap(), pair.fingerprint);
    }

    #[test]
    fn fingerprint_matches_ssh_keygen() {
        // Made with `ssh-keygen -t ed25519`; `ssh-keygen -lf` printed this fingerprint.
        let key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAILbBb74Tqeww9J+3OUdxirDinttxh0BweXo4lEE08c1T test";
        assert_eq!(fingerprint(key).unwrap(), "SHA256:Ie02OOeEPWKgGa1PKQc+bp93olE+2vf6bXKS0rTqz0Y");
    }

    #[test]
    fn secret_data_uses_the_source_key_names_and_hides_the_private_key_in_debug() {
        let pair = generate("c").unwrap();
        let data = pair.secret_data("gitlab.example.com ssh-ed25519 AAAA\n");
        assert_eq!(data.keys().map(String::as_str).collect::<Vec<_>>(), ["identity", "identity.pub", "known_hosts"]);
        assert!(!format!("{pair:?}").contains("PRIVATE KEY"));
    }

    #[test]
    fn garbage_is_refused_with_what_is_expected() {
        let error = fingerprint("not a key").unwrap_err();
        assert!(error.to_string().contains("expected `ssh-ed25519"), "{error}");
        assert!(public_key_of("nope").unwrap_err().to_string().contains("`identity` is not an OpenSSH private key"));
    }
}
