"""mfargo: compile Metaflow flows to Argo Workflows; @parallel steps become JobSet gangs."""

__version__ = "0.1.0"
