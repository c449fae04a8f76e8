"""Tests against real servers in this process: an embedded Valkey and Debian's redis-server, a
local Redis Cluster, the gateway app in-process on a loopback port driven by the real `openai` SDK,
the recorder and the memory worker."""
