"""The gateway's configuration: strict, typed, and loud about mistakes.

Every model rejects unknown keys, and a bad file fails at start-up with the dotted key and the
reason (`tenants.acme.context.max_recent_turns: Input should be greater than 0`). Secrets never
live in the file: strings may reference environment variables as `${NAME}` (or
`${NAME:-default}`), API keys are either `{env: NAME}` or `{sha256: <hex digest>}`, and model
keys are named by `api_key_env`.

This package's surface: `load_config` / `parse_config` (loader.py) build a `Config` (root.py),
whose sections have modules of their own: server, recorder, request (headers and request
limits), memory, access (keys and rate limits), operations (console and tracing), encryption,
and one tenant's section in tenant.py (with context and upstream). tenants.py is the request
path's view of the tenants; extras.py checks the installed extras.

Every layer above the core may import the config; it imports only core and errors.
"""

from gateway.config.access import AdminConfig, ApiKey, RateLimitsConfig, TenantApiKey, hash_key
from gateway.config.context import ContextConfig
from gateway.config.encryption import EncryptionConfig
from gateway.config.loader import interpolate, load_config, parse_config
from gateway.config.memory import MemoryConfig, TenantMemoryConfig
from gateway.config.operations import ConsoleConfig, TracingConfig
from gateway.config.recorder import RecorderConfig
from gateway.config.request import HeaderConfig, RequestLimitsConfig
from gateway.config.root import Config, StoreClusterConfig
from gateway.config.server import ServerConfig
from gateway.config.tenant import TenantConfig
from gateway.config.upstream import ModelConfig, ModelPriceConfig
from gateway.errors import ConfigError

__all__ = [
    "AdminConfig", "ApiKey", "Config", "ConfigError", "ConsoleConfig", "ContextConfig",
    "EncryptionConfig", "HeaderConfig", "MemoryConfig", "ModelConfig", "ModelPriceConfig",
    "RateLimitsConfig", "RecorderConfig", "RequestLimitsConfig", "ServerConfig",
    "StoreClusterConfig", "TenantApiKey", "TenantConfig", "TenantMemoryConfig", "TracingConfig",
    "hash_key", "interpolate", "load_config", "parse_config",
]
