//! The server's certificate authority and serving certificate.
//!
//! The CA is generated on first start and kept in the data dir (`ca.crt`, `ca.key`),
//! so kubeconfigs written earlier stay valid across restarts. The serving certificate
//! is reissued from that CA at every start, for the names the server is reached by.

use std::path::Path;
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType};

use crate::fsutil::write_private;

/// PEM material for serving and for clients.
pub struct TlsMaterial {
    /// The CA certificate, for kubeconfigs.
    pub ca_pem: String,
    /// The serving certificate chain.
    pub cert_pem: String,
    /// The serving key.
    pub key_pem: String,
}

impl TlsMaterial {
    /// The server's TLS configuration: the serving certificate, no client certificates
    /// (clients authenticate with bearer tokens), and HTTP/2 or HTTP/1.1 by ALPN,
    /// HTTP/2 first, as kube-apiserver offers them.
    pub fn server_config(&self) -> anyhow::Result<Arc<rustls::ServerConfig>> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let chain = CertificateDer::pem_slice_iter(self.cert_pem.as_bytes()).collect::<Result<Vec<_>, _>>()?;
        let key = PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes())?;
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(chain, key)?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

fn ca_params(common_name: &str) -> Result<CertificateParams, rcgen::Error> {
    let mut p = CertificateParams::new(Vec::<String>::new())?;
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    p.distinguished_name = dn;
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    // Ten years: a development control plane should not expire under its users.
    p.not_after = rcgen::date_time_ymd(2036, 1, 1);
    Ok(p)
}

/// Loads or creates the CA in `dir`, and issues a serving certificate for `hosts`
/// (DNS names or IP addresses).
pub fn load_or_create(dir: &Path, ca_name: &str, hosts: &[String]) -> anyhow::Result<TlsMaterial> {
    let (crt, key) = (dir.join("ca.crt"), dir.join("ca.key"));
    let params = ca_params(ca_name)?;
    let (ca_pem, ca_key) = if crt.exists() && key.exists() {
        let key_pem = std::fs::read_to_string(&key)?;
        (std::fs::read_to_string(&crt)?, KeyPair::from_pem(&key_pem)?)
    } else {
        let ca_key = KeyPair::generate()?;
        let cert = params.self_signed(&ca_key)?;
        write_private(&key, ca_key.serialize_pem().as_bytes())?;
        write_private(&crt, cert.pem().as_bytes())?;
        (cert.pem(), ca_key)
    };
    // The issuer is rebuilt from the same subject and key, which is all a signature needs.
    let issuer = Issuer::new(params, ca_key);
    let mut names: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
    for h in hosts {
        if !names.contains(h) && !h.is_empty() && h != "0.0.0.0" && h != "::" {
            names.push(h.clone());
        }
    }
    let mut leaf = CertificateParams::new(Vec::<String>::new())?;
    leaf.subject_alt_names = names
        .iter()
        .map(|n| match n.parse::<std::net::IpAddr>() {
            Ok(ip) => Ok(SanType::IpAddress(ip)),
            Err(_) => Ok(SanType::DnsName(n.clone().try_into()?)),
        })
        .collect::<Result<_, rcgen::Error>>()?;
    leaf.distinguished_name.push(DnType::CommonName, "flotilla-apiserver");
    leaf.not_after = rcgen::date_time_ymd(2036, 1, 1);
    let leaf_key = KeyPair::generate()?;
    let cert = leaf.signed_by(&leaf_key, &issuer)?;
    Ok(TlsMaterial { ca_pem: ca_pem.clone(), cert_pem: format!("{}{}", cert.pem(), ca_pem), key_pem: leaf_key.serialize_pem() })
}
