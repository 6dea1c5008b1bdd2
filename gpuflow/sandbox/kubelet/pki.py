"""The certificates between the API server and the emulated kubelets' HTTPS servers.

A kubelet serves its pods' logs over HTTPS (kubelet_server.py) and the API server
proxies `kubectl logs` to it. As kubeadm lays it out, both sides hold certificates
signed by the cluster's CA (controlplane.py `write_serving_pki`, which keeps its key
as ca.key in the same folder):

- `write_kubelet_client`: the API server's client certificate toward the kubelets
  (kubeadm's apiserver-kubelet-client.crt, CN kube-apiserver-kubelet-client), which
  controlplane.py passes as --kubelet-client-certificate and -key;
- `write_kubelet_serving`: a node's kubelet serving certificate for its address
  (kubeadm's kubelet.crt, CN system:node:<name>), which the API server checks against
  the CA (--kubelet-certificate-authority), as a kubelet's with serverTLSBootstrap.

Called by controlplane.py (the client certificate, at start) and by whoever starts a
ProcessKubelet that serves logs (the sandbox, cluster.py; the tests).
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_CERT = "ca.crt"
CA_KEY = "ca.key"
KEY_BITS = 2048  # RSA size kubeadm generates
CERT_DAYS = 365  # kubeadm's leaf certificates last a year
CLIENT_NAME = "apiserver-kubelet-client"  # kubeadm's file names
CLIENT_CN = "kube-apiserver-kubelet-client"
CLIENT_ORG = "system:masters"  # kubeadm's group for it before v1.29; any authorised one


@dataclass(frozen=True)
class KubeletTls:
    """A kubelet's serving certificate and key, and the CA its clients' must chain to."""

    cert_file: Path
    key_file: Path
    client_ca_file: Path


def write_kubelet_client(pki: Path) -> tuple[Path, Path]:
    """The API server's client certificate and key toward the kubelets, signed by the
    CA in `pki`; their paths."""
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, CLIENT_ORG),
            x509.NameAttribute(NameOID.COMMON_NAME, CLIENT_CN),
        ]
    )
    return _signed(pki, CLIENT_NAME, name, [], ExtendedKeyUsageOID.CLIENT_AUTH)


def write_kubelet_serving(pki: Path, node: str, address: str) -> KubeletTls:
    """`node`'s kubelet serving certificate for `address` and its name, signed by the
    CA in `pki`, in `pki`/kubelets/."""
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
            x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{node}"),
        ]
    )
    sans: list[x509.GeneralName] = [
        x509.DNSName(node),
        x509.IPAddress(ipaddress.ip_address(address)),
    ]
    cert, key = _signed(pki, f"kubelets/{node}", name, sans, ExtendedKeyUsageOID.SERVER_AUTH)
    return KubeletTls(cert, key, pki / CA_CERT)


def _signed(
    pki: Path,
    stem: str,
    subject: x509.Name,
    sans: list[x509.GeneralName],
    usage: x509.ObjectIdentifier,
) -> tuple[Path, Path]:
    ca = x509.load_pem_x509_certificate((pki / CA_CERT).read_bytes())
    ca_key = serialization.load_pem_private_key((pki / CA_KEY).read_bytes(), password=None)
    assert isinstance(ca_key, rsa.RSAPrivateKey)
    key = rsa.generate_private_key(public_exponent=65537, key_size=KEY_BITS)
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=CERT_DAYS))
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    cert_file, key_file = pki / f"{stem}.crt", pki / f"{stem}.key"
    cert_file.parent.mkdir(parents=True, exist_ok=True)
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    key_file.chmod(0o600)
    return cert_file, key_file
