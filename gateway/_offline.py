"""Keep third-party libraries off the network: nothing is fetched at import or run time.

litellm fetches its model cost map at import unless told to use the bundled one, and tiktoken
downloads its encodings on first use; litellm ships the encoding files tiktoken expects, so we
point tiktoken's cache there. Environment variables an operator already set
win. This runs when the `gateway` package is imported, before either library is.
"""

import importlib.util
import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

if "TIKTOKEN_CACHE_DIR" not in os.environ:
    _spec = importlib.util.find_spec("litellm")
    if _spec is not None and _spec.submodule_search_locations:
        os.environ["TIKTOKEN_CACHE_DIR"] = os.path.join(
            list(_spec.submodule_search_locations)[0], "litellm_core_utils", "tokenizers")
