"""Everything served over HTTP: the app factory, the handlers of the chat API, the memory API,
admin and OpenAPI, and the operators' console. Handlers only translate (parse, call the pipeline or
memory control, serialise). Nothing below this package imports it; only `gateway.cli` does."""
