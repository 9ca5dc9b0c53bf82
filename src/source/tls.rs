//! Trust for HTTPS remotes with a CA bundle of their own: the server's certificate must be one of
//! the bundle's certificates (a pinned self-signed certificate) or chain to one of them and name
//! the host.

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};

/// Checks the server's leaf certificate (DER) for `host` against the PEM `bundle`.
pub fn verify(leaf: &[u8], bundle: &str, host: &str) -> Result<(), String> {
    let anchors_der: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(bundle.as_bytes()).filter_map(Result::ok).collect();
    if anchors_der.is_empty() {
        return Err("the CA bundle holds no PEM certificate".into());
    }
    if anchors_der.iter().any(|ca| ca.as_ref() == leaf) {
        return Ok(());
    }
    let anchors: Vec<_> = anchors_der.iter().filter_map(|der| webpki::anchor_from_trusted_cert(der).ok()).collect();
    let leaf = CertificateDer::from(leaf);
    let end_entity = webpki::EndEntityCert::try_from(&leaf).map_err(|e| format!("unreadable certificate: {e}"))?;
    end_entity
        .verify_for_usage(
            webpki::ALL_VERIFICATION_ALGS,
            &anchors,
            &[],
            UnixTime::now(),
            webpki::KeyUsage::server_auth(),
            None,
            None,
        )
        .map_err(|e| format!("{e}"))?;
    let name = ServerName::try_from(host).map_err(|_| format!("`{host}` is not a valid server name"))?;
    end_entity.verify_is_valid_for_subject_name(&name).map_err(|e| format!("{e}"))
}
