"""What memory keeps in the store: its keys, and one store per kind (summary chunks, facts,
pins, profile, settings, topics, vectors). The lowest memory layer: imports no other memory
package but `gateway.memory.ports`."""
