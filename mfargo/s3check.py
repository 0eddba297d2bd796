"""Before an upload to S3: fail in seconds, in one line, when it cannot work.

Metaflow's own S3 client retries a refused or silent endpoint for minutes (its retry
loop, with backoff), so every upload mfargo asks for at compile or deploy time (the code
package, IncludeFile defaults) first asks the bucket once with short timeouts and no
retry: no credentials, an endpoint that does not answer, or a bucket that refuses us is
one line naming the endpoint.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from mfargo.base.errors import UserError

TIMEOUT = 5.0  # seconds to connect, and to read the answer


def preflight(url: str, what: str, hint: str = "", timeout: float = TIMEOUT) -> None:
    """Check that ``what`` (e.g. "uploading the code package") can write to ``url``'s bucket."""
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError
    from metaflow import metaflow_config

    endpoint = getattr(metaflow_config, "S3_ENDPOINT_URL", None) or None
    session = boto3.session.Session()
    if session.get_credentials() is None:
        raise UserError("%s to %s: no AWS credentials found%s" % (what, url, hint))
    client = session.client("s3", endpoint_url=endpoint, config=Config(
        connect_timeout=timeout, read_timeout=timeout, retries={"max_attempts": 1}))
    bucket = urlsplit(url).netloc
    try:
        client.head_bucket(Bucket=bucket)
    except ClientError as e:
        code = e.response.get("Error", {}).get("Code", "?")
        raise UserError("%s: bucket %s answered %s%s" % (what, bucket, code, hint)) from None
    except (BotoCoreError, OSError) as e:
        raise UserError("%s: cannot reach S3 at %s: %s%s" % (what, endpoint or "AWS", " ".join(str(e).split()), hint)) from None
