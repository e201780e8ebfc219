"""Talking to Lakekeeper: its Management API and the few Iceberg REST catalog calls the portal
needs to browse and purge a warehouse. `client.py` is the client, `tokens.py` the tokens it
acts with, `resources.py` what the API takes and returns, `errors.py` its failures,
`versions.py` the Lakekeeper releases it works with (0.13.x; the app's client refuses others);
import each name from the module that defines it.

Requests and responses follow Lakekeeper's published OpenAPI documents
(`management-open-api.yaml`, `rest-catalog-open-api.yaml`); the tests check every request
this module sends against them.

Identity: the portal manages Lakekeeper as one service client (OAuth2 client-credentials
grant, `ClientCredentialsTokenSource`), never with the signed-in user's token: a user's
access token can expire in the middle of a long purge, and background work would force the
portal to store user tokens. With Lakekeeper's OpenFGA authorizer that service identity is a
project admin: it creates warehouses and manages their grants, and gives `ownership` of each
warehouse to its Lakeport owner's Lakekeeper identity (`lakekeeper_user_id`, `oidc~<subject>`)
and to nobody else (`grant_sole_ownership`).
An execution acts as its user instead (`LakekeeperClient.user_token`): the service client
exchanges its own token at the identity provider (OAuth 2.0 Token Exchange, RFC 8693) for a
short-lived token whose subject is the executing user, optionally narrowed further by a
`warehouse:<id>` scope. It is minted fresh for each run, never cached or reused.

Errors: every failure is a `LakekeeperError` (errors.py).

Retries: only calls that are safe to repeat are retried (GETs, DELETEs, and POSTs that
set an absolute state: rename, credential rotation, (de)activation, delete profile, grant
changes, a user's registration), on connection failures, timeouts and 502/503/504.
Creating a warehouse is never retried.

Modules:
- `client.py` — the Management API and the Iceberg REST calls the portal makes; retries
- `tokens.py` — the service token, users' exchanged tokens, warehouse scopes
- `resources.py` — what the API takes and returns
- `errors.py` — failures, with a message a user may read
- `versions.py` — the Lakekeeper releases supported, checked at the client's first call
"""
