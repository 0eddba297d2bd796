"""Flow graph -> intermediate representation (plain dataclasses, no Argo types)."""
