"""Encryption at rest: stored texts sealed with AES-256-GCM, per tenant.

A sealed text is `enc1:<key id>:<base64(nonce || ciphertext || tag)>`: a random 96-bit nonce
per text, the key id (a fingerprint of the key, not the key) so a reader picks the right key
and rotation tells old texts from new, and associated data binding it to its tenant and key
id — a ciphertext copied into another tenant's keys fails to open even when both tenants
share one key.

Invariants:
- `seal` and `open` of a tenant without a key are the identity (no prefix, the bytes of today:
  a store written without encryption reads the same); a sealed text read for a tenant without
  a key, or under a key id the tenant does not have, raises `DecryptError` — never garbage;
- `open` accepts plaintext JSON for a tenant with a key (stores written before encryption was
  switched on; `gateway rotate-key` seals them). Stored JSON never starts with the prefix;
- the keys live in this process's memory only: the data keys come from the environment, the
  tenant's index key (naming fact keys, deduplicating retried enqueues) is kept in the store
  sealed with the data key (`gateway.store.encryption.keyring`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

PREFIX = "enc1:"
_NONCE_BYTES = 12


class DecryptError(ValueError):
    """A stored text that cannot be opened: a wrong or missing key, another tenant's text, or
    corrupt data. Its message names tenant and key id, never the text."""


def key_id(key: bytes) -> str:
    """A short public name of a key: an HMAC of a constant, so it reveals nothing of the key."""
    return hmac.new(key, b"context-gateway key id", hashlib.sha256).hexdigest()[:8]


def _aad(tenant: str, kid: str) -> bytes:
    return f"enc1|{len(tenant)}:{tenant}|{kid}".encode()


@dataclass(frozen=True, slots=True)
class DataKey:
    """One AES-256-GCM key."""

    key: bytes = field(repr=False)
    id: str = ""
    aead: AESGCM = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "id", key_id(self.key))
        object.__setattr__(self, "aead", AESGCM(self.key))


def seal_with(key: DataKey, tenant: str, text: str) -> str:
    nonce = os.urandom(_NONCE_BYTES)
    body = nonce + key.aead.encrypt(nonce, text.encode(), _aad(tenant, key.id))
    return f"{PREFIX}{key.id}:{base64.b64encode(body).decode()}"


def sealed_key_id(text: str) -> str | None:
    """The key id of a sealed text; None for plaintext."""
    if not text.startswith(PREFIX):
        return None
    return text[len(PREFIX):].partition(":")[0]


@dataclass(frozen=True, slots=True)
class TenantCipher:
    """One tenant's keys: `current` seals; `current` and `previous` (during a rotation) open.
    `index_key` (from the keyring) keys the HMACs of `digest` and `name`."""

    tenant: str
    current: DataKey
    previous: DataKey | None = None
    index_key: bytes = field(default=b"", repr=False)

    def seal(self, text: str) -> str:
        return seal_with(self.current, self.tenant, text)

    def open(self, text: str) -> str:
        if not text.startswith(PREFIX):
            return text  # written before encryption was on (see the module docstring)
        kid, _, body = text[len(PREFIX):].partition(":")
        key = self.current if kid == self.current.id else (
            self.previous if self.previous is not None and kid == self.previous.id else None)
        if key is None:
            raise DecryptError(f"tenant {self.tenant}: stored text sealed with key {kid}, "
                               f"which is neither the current key ({self.current.id}) nor "
                               "the previous one")
        try:
            raw = base64.b64decode(body, validate=True)
            plain = key.aead.decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:],
                                     _aad(self.tenant, kid))
            return plain.decode()
        except (InvalidTag, binascii.Error, ValueError):
            raise DecryptError(f"tenant {self.tenant}: a stored text under key {kid} does "
                               "not authenticate (corrupt, or another tenant's)") from None

    def stale(self, text: str) -> bool:
        """Not sealed with the current key (plaintext, or an older key): rotation's work."""
        return sealed_key_id(text) != self.current.id

    def digest(self, text: str) -> str:
        """40 hex characters keyed by the index key: equal texts, equal digests, and nothing
        else learnt (a plain hash of a text could be checked against guesses)."""
        return hmac.new(self.index_key, b"digest\0" + text.encode(),
                        hashlib.sha256).hexdigest()[:40]

    def name(self, text: str) -> str:
        """A stored name for a name that holds user content (a fact key: `prefers_<thing>`)."""
        return "h:" + hmac.new(self.index_key, b"name\0" + text.encode(),
                               hashlib.sha256).hexdigest()[:32]


class Encryption:
    """The ciphers of the tenants that have a key; every other tenant's texts stay plain.
    Immutable once built; one per process, passed to every store that keeps text."""

    def __init__(self, ciphers: Mapping[str, TenantCipher] | None = None):
        self._ciphers = dict(ciphers or {})

    @property
    def enabled(self) -> bool:
        return bool(self._ciphers)

    def cipher(self, tenant: str) -> TenantCipher | None:
        return self._ciphers.get(tenant)

    @property
    def tenants(self) -> tuple[str, ...]:
        return tuple(sorted(self._ciphers))

    def seal(self, tenant: str, text: str) -> str:
        cipher = self._ciphers.get(tenant)
        return text if cipher is None else cipher.seal(text)

    def open(self, tenant: str, text: str) -> str:
        cipher = self._ciphers.get(tenant)
        if cipher is not None:
            return cipher.open(text)
        if text.startswith(PREFIX):
            raise DecryptError(f"tenant {tenant}: stored text is encrypted (key "
                               f"{sealed_key_id(text)}) but the tenant has no key configured")
        return text

    def open_or_none(self, tenant: str, text: str | None) -> str | None:
        return None if text is None else self.open(tenant, text)

    def digest(self, tenant: str, text: str) -> str:
        """The tenant's keyed digest of `text`; "" without encryption (callers hash as
        before)."""
        cipher = self._ciphers.get(tenant)
        return "" if cipher is None else cipher.digest(text)

    def name(self, tenant: str, text: str) -> str:
        cipher = self._ciphers.get(tenant)
        return text if cipher is None else cipher.name(text)


NO_ENCRYPTION = Encryption()
"""Every tenant plain (immutable: it holds no cipher and never gets one)."""
