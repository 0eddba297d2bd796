"""Run a compiled WorkflowTemplate on this machine, playing Argo and the JobSet controller."""
