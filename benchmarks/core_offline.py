"""Run a flow file with Metaflow core's own `argo-workflows create --only-json`, offline.

Why: core's `create` uploads the code package to the datastore even with --only-json, which
needs a reachable S3. This stands in for the upload (the package is still built and hashed,
as mfargo builds and hashes it) and changes nothing else. compile_scale.py runs it with
METAFLOW_EXTENSIONS_SEARCH_DIRS pointing at an empty directory, so core's compiler is used.

    python benchmarks/core_offline.py flow.py --datastore=s3 ... argo-workflows create --only-json
"""

from __future__ import annotations

import hashlib
import runpy
import sys

from metaflow.datastore.flow_datastore import FlowDataStore


def _save_data_offline(self, data_iter, len_hint=0):
    """(url, sha) per blob, the content-addressed URL the upload would have produced."""
    out = []
    for blob in data_iter:
        blob = blob.getvalue() if hasattr(blob, "getvalue") else blob
        sha = hashlib.sha1(blob).hexdigest()
        storage = self.ca_store._storage_impl
        out.append((storage.full_uri(storage.path_join(self.ca_store._prefix, sha[:2], sha)), sha))
    return out


if __name__ == "__main__":
    FlowDataStore.save_data = _save_data_offline
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")
