"""What operators watch: JSON logs, Prometheus metrics (request and job figures), tracing.
Any layer above `gateway.config` may import it; it imports only config, core and errors."""
