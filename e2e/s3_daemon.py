"""Keep a SeaweedFS S3 server (runner/s3server.py) running for the cluster until SIGTERM.

Usage: s3_daemon.py DATA_DIR HOST BUCKET INFO_JSON. Writes the server's client environment
(endpoint, credentials) to INFO_JSON once the bucket exists; on SIGTERM stops every weed process
(S3Server kills its whole process group, even if this process dies).
"""

import importlib.util
import json
import os
import signal
import sys
from pathlib import Path

data_dir, host, bucket, info = sys.argv[1:5]
spec = importlib.util.spec_from_file_location(
    "s3server", Path(__file__).resolve().parent.parent / "runner" / "s3server.py")
s3server = importlib.util.module_from_spec(spec)
spec.loader.exec_module(s3server)

srv = s3server.S3Server.start(Path(data_dir), keep=True, host=host, timeout=60)
signal.signal(signal.SIGTERM, lambda *_: (srv.stop(), sys.exit(0)))
srv.create_bucket(bucket)
tmp = Path(info + ".tmp")
tmp.write_text(json.dumps(srv.env()))
os.replace(tmp, info)
while True:
    signal.pause()
