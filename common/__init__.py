"""Small helpers shared by every stage: paths, atomic writes, manifests, user-facing errors."""
