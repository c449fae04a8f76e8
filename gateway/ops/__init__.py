"""What operators watch: JSON logs, Prometheus metrics (request and job figures), tracing;
and the process's free C-allocator memory handed back to the system.
Any layer above `gateway.config` may import it; it imports only config, core and errors."""
