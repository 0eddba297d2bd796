"""mfargo inside Metaflow's CLI: ``python flow.py argo-workflows ...`` and the Deployer API.
Metaflow finds them through the extension's ``mfextinit_mfargo.py``; what the flow gives
(graph, decorators, config, code package) is gathered here into ``CompileOptions``."""
