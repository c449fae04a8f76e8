"""ports.Upstream through `litellm.acompletion`, every setting passed per call.

What litellm 1.106.2 would otherwise do to a request, and how this adapter keeps it untouched
(each point pinned by tests/integration/test_upstream_litellm.py):

- For the `openai` provider (`openai/<model>` with an api_base, or a bare OpenAI model name)
  every body field but `stream` goes in `extra_body`, which the openai SDK merges over the JSON
  it builds — `messages` included. Passed as keyword arguments instead, litellm would refuse
  fields it thinks the model lacks (`reasoning_effort` on gpt-4o-mini: UnsupportedParamsError),
  crash on `tools` (its MCP check imports the optional `mcp` package), and rewrite others:
  `stop` cut to 4 entries, `tool_choice: {"type": "auto"}` turned into `"auto"`, message keys
  whose value is null dropped, string `image_url`s wrapped, tool-schema `pattern`s it cannot
  compile dropped, `cache_control` stripped for api.openai.com; `metadata` would be taken as
  litellm's own option and never sent. Fields named like litellm options (`api_base`,
  `mock_response`, `timeout`, ...) are sent as data and never obeyed.
  `messages` is still given to litellm (a deep copy: it edits messages in place) for its own
  bookkeeping; `stream_options` is a keyword when streaming so litellm passes usage chunks on.
- Other providers need litellm's translation: OpenAI's chat parameters go as keyword
  arguments (litellm raises a 400 for one the provider cannot take, `drop_params=False`), other
  fields as provider-specific keyword arguments, except names litellm would take as its own
  options, which are not sent (logged).
- litellm re-labels errors by their message text (a 400 whose message mentions a rate limit
  becomes a 429) and connection failures as 500; the status and body are taken from the
  upstream's own HTTP response further down the exception chain instead.
- The openai SDK's own retries are off (`max_retries=0`): the client decides about retrying
  answers. One failure is retried here, once: not reaching the upstream at all (a refused
  connection, or a pooled keep-alive connection the upstream had closed) — the request was
  not processed, and the client could not tell this hiccup from a real outage.
"""

from __future__ import annotations

import copy
import logging
from typing import Any, AsyncIterator

from gateway.errors import UpstreamError, UpstreamTimeout
from gateway.ports import UpstreamCall

log = logging.getLogger(__name__)

# OpenAI chat parameters litellm translates for non-OpenAI providers.
_OPENAI_CHAT_PARAMS = frozenset((
    "messages", "temperature", "top_p", "n", "stop", "max_tokens", "max_completion_tokens",
    "presence_penalty", "frequency_penalty", "logit_bias", "user", "response_format", "seed",
    "tools", "tool_choice", "parallel_tool_calls", "logprobs", "top_logprobs", "functions",
    "function_call", "reasoning_effort", "verbosity", "modalities", "prediction", "audio",
    "web_search_options", "service_tier", "safety_identifier", "prompt_cache_key", "store",
    "thinking", "stream_options"))
# The provider gets the body verbatim in extra_body; anything else goes through translation.
_PASSTHROUGH_PROVIDERS = frozenset(("openai",))


class LitellmUpstream:
    """Calls any litellm-supported model; OpenAI-compatible upstreams get the body untouched.

    Construction imports litellm, which takes seconds, so build it once, in the app's lifespan.
    """

    def __init__(self) -> None:
        import litellm  # deliberately here, not at module level: `import gateway` stays fast
        from litellm.types.utils import all_litellm_params

        self._litellm = litellm
        # litellm prints a multi-line "Give Feedback / Get Help" banner to stdout on every
        # upstream error, which would break the one-JSON-line-per-request log. This flag is
        # litellm's only switch for it; it changes nothing about requests.
        litellm.suppress_debug_info = True
        # Names acompletion takes as its own options; never filled from a client's body.
        self._litellm_options = (frozenset(all_litellm_params)
                                 | frozenset(_signature_names(litellm.acompletion))
                                 | {"extra_body", "drop_params"}) - _OPENAI_CHAT_PARAMS

    async def complete(self, call: UpstreamCall) -> dict[str, Any]:
        response = await self._call(call, stream=False)
        return completion_dict(response.model_dump())

    async def stream(self, call: UpstreamCall) -> AsyncIterator[dict[str, Any]]:
        # An async generator: nothing runs until the first __anext__, so an upstream that
        # refuses the request raises there, before the caller has committed to a status.
        response = await self._call(call, stream=True)
        try:
            async for chunk in response:
                yield chunk_dict(chunk.model_dump())
        except Exception as exc:  # a failure mid-stream
            raise upstream_error(exc) from exc
        finally:
            await response.aclose()

    async def _call(self, call: UpstreamCall, *, stream: bool) -> Any:
        for attempt in (1, 2):
            try:
                return await self._litellm.acompletion(**self._arguments(call, stream=stream))
            except Exception as exc:  # litellm raises many types; all become one UpstreamError
                error = upstream_error(exc)
                if attempt == 1 and error.code == "upstream_unreachable":
                    log.warning("upstream unreachable, retrying once: %s", error.message)
                    continue
                raise error from exc
        raise AssertionError("unreachable")

    def _arguments(self, call: UpstreamCall, *, stream: bool) -> dict[str, Any]:
        body = call.body
        arguments: dict[str, Any] = {"max_retries": 0, **call.extra, "model": call.model,
                                     "stream": stream, "timeout": call.timeout,
                                     "drop_params": False}
        if call.api_base is not None:
            arguments["api_base"] = call.api_base
        if call.api_key is not None:
            arguments["api_key"] = call.api_key
        if self._provider(call) in _PASSTHROUGH_PROVIDERS:
            arguments["messages"] = copy.deepcopy(body.get("messages") or [])
            arguments["extra_body"] = {k: v for k, v in body.items()
                                       if k != "stream" and not (stream and k == "stream_options")}
            if stream and body.get("stream_options") is not None:
                arguments["stream_options"] = body["stream_options"]
            return arguments
        for key, value in body.items():
            if key == "stream" or (key == "stream_options" and not stream):
                continue
            if key in self._litellm_options:
                log.warning("request field %r not sent to %s: litellm takes it as its own option",
                            key, call.model)
                continue
            # litellm edits messages and tools in place; the caller's body must stay as it is.
            arguments[key] = copy.deepcopy(value) if key in ("messages", "tools") else value
        arguments.setdefault("messages", [])
        # litellm's MCP check on `tools` imports the optional `mcp` package; no MCP here.
        arguments["_skip_mcp_handler"] = True
        return arguments

    def _provider(self, call: UpstreamCall) -> str | None:
        try:
            return self._litellm.get_llm_provider(call.model, api_base=call.api_base)[1]
        except Exception:  # an unknown provider: acompletion raises the proper error
            return None


def completion_dict(dump: dict[str, Any]) -> dict[str, Any]:
    """litellm's ModelResponse dump back in OpenAI's `chat.completion` shape."""
    out = _top_level(dump)
    out["choices"] = [
        {"index": c.get("index", 0), "message": _message(c.get("message") or {}),
         "logprobs": c.get("logprobs"), "finish_reason": c.get("finish_reason")}
        for c in dump.get("choices") or []]
    return out


def chunk_dict(dump: dict[str, Any]) -> dict[str, Any]:
    """litellm's ModelResponseStream dump back in OpenAI's `chat.completion.chunk` shape."""
    out = _top_level(dump)
    choices = [{"index": c.get("index", 0), "delta": _message(c.get("delta") or {}, delta=True),
                "logprobs": c.get("logprobs"), "finish_reason": c.get("finish_reason")}
               for c in dump.get("choices") or []]
    # OpenAI's usage chunk has no choices; litellm gives it an empty one.
    if out.get("usage") and all(not c["delta"] and c["finish_reason"] is None for c in choices):
        choices = []
    out["choices"] = choices
    return out


# Keys litellm adds to what the upstream sent.
_LITELLM_TOP_KEYS = frozenset(("provider_specific_fields", "citations", "moderation"))
_LITELLM_USAGE_KEYS = frozenset(("cost",))


def _top_level(dump: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in dump.items()
           if k not in _LITELLM_TOP_KEYS and k != "choices" and v is not None}
    if isinstance(out.get("usage"), dict):
        out["usage"] = _without_nulls({k: v for k, v in out["usage"].items()
                                       if k not in _LITELLM_USAGE_KEYS})
    return out


def _message(message: dict[str, Any], *, delta: bool = False) -> dict[str, Any]:
    """A message or delta without litellm's null placeholders; fields litellm tucked into
    `provider_specific_fields` (e.g. `refusal`) back at their place."""
    extra = message.get("provider_specific_fields") or {}
    out = {k: v for k, v in extra.items() if v is not None}
    out.update((k, v) for k, v in message.items()
               if v is not None and k != "provider_specific_fields")
    if not delta:
        out.setdefault("content", None)  # OpenAI sends `content: null` next to tool calls
    return out


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    return value


def upstream_error(exc: BaseException) -> UpstreamError:
    """Any exception out of litellm as an UpstreamError with the upstream's own status and
    error body (timeouts 504, unreachable 502)."""
    import httpx
    import litellm
    import openai

    chain = _chain(exc)
    if any(isinstance(e, (httpx.TimeoutException, openai.APITimeoutError, litellm.Timeout))
           for e in chain):
        return UpstreamTimeout()
    # The upstream's real answer, deepest first: litellm's own wrappers subclass openai's
    # errors but carry a status guessed from the message text.
    for e in reversed(chain):
        response = getattr(e, "response", None)
        if (isinstance(e, (httpx.HTTPStatusError, openai.APIStatusError))
                and isinstance(response, httpx.Response)
                and not type(e).__module__.startswith("litellm")):
            body = _openai_error_body(response, getattr(e, "body", None))
            message = body["error"].get("message") if body else None
            return UpstreamError(str(message or f"The upstream answered HTTP "
                                                f"{response.status_code}."),
                                 status=response.status_code, upstream_body=body)
    if any(isinstance(e, (httpx.TransportError, openai.APIConnectionError))
           and not type(e).__module__.startswith("litellm") for e in chain):
        return UpstreamError(f"Could not reach the upstream model: {exc}", status=502,
                             code="upstream_unreachable")
    status = getattr(exc, "status_code", None)
    if not isinstance(status, int) or not 400 <= status <= 599 \
            or isinstance(exc, litellm.APIConnectionError):
        status = 502  # litellm's label for its own internal failures; not the upstream's status
    body = getattr(exc, "body", None)
    upstream_body = {"error": body} if isinstance(body, dict) and "message" in body else None
    return UpstreamError(str(exc), status=status, upstream_body=upstream_body)


def _openai_error_body(response: Any, sdk_body: Any) -> dict[str, Any] | None:
    try:
        data = response.json()
    except Exception:  # not read (stream) or not JSON
        data = None
    if isinstance(data, dict) and isinstance(data.get("error"), dict):
        return data
    if isinstance(sdk_body, dict) and "message" in sdk_body:
        return {"error": sdk_body}  # the openai SDK unwraps `error`
    return None


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _signature_names(function: Any) -> list[str]:
    import inspect

    return [name for name, p in inspect.signature(function).parameters.items()
            if p.kind is not inspect.Parameter.VAR_KEYWORD]
