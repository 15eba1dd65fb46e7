"""How the local issuer keeps its RSA keys: the private half encrypted at rest.

The database (what a backup or a support bundle copies) never holds a private key in
clear: ``SigningKey.sealed_private_key`` is the key's PKCS#8 PEM encrypted with
AES-256-GCM under a key-encryption key (KEK) kept outside the database, in a ``0600``
file (``settings.LOCAL_ISSUER_KEY_FILE``; default ``<DATA_DIR>/local-issuer-kek``)
made on first use. Whoever can read the KEK file and the database can sign tokens;
either alone cannot. The key id is the associated data, so a sealed key copied into
another row does not open. The JWKS derives each public key from the key it unseals, so
whoever can write the database alone cannot slip a verification key into it.

Sealed format: ``aes256gcm:<base64url 12-byte nonce>:<base64url ciphertext and tag>``.
The KEK file holds 32 random bytes, base64url, on one line.
"""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from django.conf import settings

from controlplane.core.private_files import read_or_create_private

_SCHEME = "aes256gcm"
_KEK_BYTES = 32
_NONCE_BYTES = 12
_RSA_BITS = 2048


class SigningKeyError(Exception):
    """A sealed key does not open: the KEK file is not the one it was sealed with (or
    not a KEK at all), or the sealed value is damaged."""


@dataclass(frozen=True)
class NewKey:
    """A freshly generated key, ready to store: nothing in it is the private key in clear."""

    kid: str
    sealed_private_key: str


def kek_file() -> Path:
    configured = settings.LOCAL_ISSUER_KEY_FILE
    return Path(configured or Path(settings.DATA_DIR) / "local-issuer-kek")


def key_encryption_key() -> bytes:
    """The KEK, made (``0600``, in a private directory) on first use."""
    path = kek_file()
    text = read_or_create_private(path, _new_kek_text)
    try:
        kek = base64.urlsafe_b64decode(text.strip())
    except ValueError as exc:
        raise SigningKeyError(f"{path} does not hold a base64url key") from exc
    if len(kek) != _KEK_BYTES:
        raise SigningKeyError(f"{path} holds {len(kek)} bytes, not a {_KEK_BYTES}-byte key")
    return kek


def generate(kid: str) -> NewKey:
    private = rsa.generate_private_key(public_exponent=65537, key_size=_RSA_BITS)
    pem = private.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return NewKey(kid=kid, sealed_private_key=seal(kid, pem))


def seal(kid: str, private_pem: bytes) -> str:
    nonce = os.urandom(_NONCE_BYTES)
    ciphertext = AESGCM(key_encryption_key()).encrypt(nonce, private_pem, kid.encode())
    return ":".join([_SCHEME, _b64(nonce), _b64(ciphertext)])


def private_key(kid: str, sealed: str) -> rsa.RSAPrivateKey:
    """The private key sealed in ``sealed`` for key ``kid``; ``SigningKeyError``
    when it does not open with this process's KEK."""
    scheme, _, rest = sealed.partition(":")
    nonce, _, ciphertext = rest.partition(":")
    if scheme != _SCHEME or not ciphertext:
        raise SigningKeyError(f"signing key {kid}: not a sealed key")
    try:
        pem = AESGCM(key_encryption_key()).decrypt(_unb64(nonce), _unb64(ciphertext), kid.encode())
    except (InvalidTag, ValueError) as exc:
        raise SigningKeyError(
            f"signing key {kid} does not open with the key-encryption key in {kek_file()}: "
            "that file was replaced, or the database belongs to another one"
        ) from exc
    key = serialization.load_pem_private_key(pem, None)
    assert isinstance(key, rsa.RSAPrivateKey)
    return key


def _new_kek_text() -> bytes:
    return base64.urlsafe_b64encode(os.urandom(_KEK_BYTES)) + b"\n"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text.encode())
