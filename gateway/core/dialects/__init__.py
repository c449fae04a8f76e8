"""The wire forms other than OpenAI Chat Completions, translated to and from the gateway's one
internal message form (`gateway/core/messages.py`, OpenAI-shaped) at the door.

Pure: bodies in, values out; a bad body raises `BadRequest` naming the field. Nothing here
knows the store or the upstream — `anthropic` (Messages API requests), `anthropic_answer`
(answers, errors, the recorded form of a reply), `anthropic_stream` (chat chunks to Messages
stream events); `responses`, `responses_answer` and `responses_stream` (the OpenAI Responses
API, likewise); `marks` (markers and extension fields every door carries), `events` (SSE)."""
