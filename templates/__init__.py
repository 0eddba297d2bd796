"""Intermediate representation -> hera objects, one module per Argo template kind."""
