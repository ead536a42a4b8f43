"""The table of a config file's keys above the deployments' options.

The top level, http_options, grpc_options, an application and its traffic
policy, in the form of servefleet/_private/configuration/field_table.py; a deployment's
options are servefleet/_private/configuration/option_fields.py's. config_file.py and
ray_config.py read their key lists and plain checks from here, and
config_schema.py writes the whole as the file's JSON Schema. Ray Serve's keys
(`serve deploy` files) are in the same sections, marked as Ray's.
"""

from __future__ import annotations

from servefleet._private.configuration.field_table import Field, Section
from servefleet._private.configuration.option_fields import (
               DEPLOYMENT_OPTIONS,
               LOGGING,
               RUNTIME,
               RUNTIME_ENV,
)

PROXY_LOCATIONS = ("EveryNode", "HeadOnly", "Disabled", "NoServer")
_PROXIES = "servefleet's proxies run where they are started (servefleet up, servefleet proxy)"
_LOGS = "servefleet processes log as their --log-format and --log-level say"

HTTP = Section("http_options", "The HTTP proxy of `servefleet up` and the cluster's HTTP "
               "settings.", (
    Field("host", "str", "The address `servefleet up`'s proxy listens on."),
    Field("port", "int", "The port `servefleet up`'s proxy listens on.", bounds=(1, 65535)),
    Field("request_timeout_s", "number", "Answer 504 when a request takes longer."),
    Field("max_request_body_bytes", "int", "The largest request body a proxy accepts.",
          bounds=(1, 1 << 50)),
    Field("keep_alive_timeout_s", "number", "", nullable=True,
          ray="not used here: set it with servefleet proxy --keep-alive-timeout-s"),
    Field("root_path", "str", "", nullable=True, choices=("", "/"),
          ray="only '' or '/': servefleet has no prefix over every route (put it in each "
              "route_prefix)"),
    Field("ssl_keyfile", "str", "", nullable=True,
          ray="not used here: set it with servefleet proxy --tls-key"),
    Field("ssl_certfile", "str", "", nullable=True,
          ray="not used here: set it with servefleet proxy --tls-cert"),
    Field("location", "str", "", nullable=True, choices=PROXY_LOCATIONS, unused=_PROXIES),
))

GRPC = Section("grpc_options", "gRPC ingress: the servicers, and where `servefleet up` "
               "serves gRPC.", (
    Field("host", "str", "The address `servefleet up`'s proxy serves gRPC on."),
    Field("port", "int", "The port `servefleet up`'s proxy serves gRPC on.",
          bounds=(1, 65535)),
    Field("grpc_servicer_functions", "str_list", "Import paths of add_XServicer_to_server "
          "functions, for every application that lists none itself.", nullable=True,
          items="import paths"),
    Field("request_timeout_s", "number", "", nullable=True,
          unused="the gRPC ingress keeps each caller's deadline"),
))

SPLIT_ENTRY = Section("split_entry", "One deployment's share of the traffic.", (
    Field("deployment", "str", "The deployment's name.", required=True),
    Field("weight", "number", "Its weight.", required=True),
))
SHADOW = Section("shadow", "A copy of some requests, sent to a deployment whose answers "
                 "are dropped.", (
    Field("deployment", "str", "The deployment's name.", required=True),
    Field("fraction", "number", "The share of requests copied (0 to 1).", required=True),
))
TRAFFIC = Section("traffic", "How the ingress's requests are split between deployments.", (
    Field("split", "mapping", "{deployment: weight}, or a list of {deployment, weight}.",
          nullable=True, values="number", section=SPLIT_ENTRY),
    Field("shadow", "section", "Shadow traffic.", nullable=True, section=SHADOW),
))

DEPLOYMENT = Section("deployment", "Options of one deployment of the application, over "
                     "those in its code.", (
    Field("name", "str", "The deployment's name, as in the code.", required=True),
    *DEPLOYMENT_OPTIONS.fields,
), exclusive=DEPLOYMENT_OPTIONS.exclusive, needs=DEPLOYMENT_OPTIONS.needs)

APPLICATION = Section("application", "One application: its code and its deployments' "
                      "options.", (
    Field("name", "str", "The application's name. Default 'default'."),
    Field("route_prefix", "str", "Where its HTTP routes start (null: no HTTP route; "
          "unset: '/').", nullable=True),
    Field("import_path", "str", "module:attribute of a bound application, a deployment or "
          "a builder function (Ray's module.attribute too).", required=True),
    Field("args", "mapping", "Arguments of a builder function.", nullable=True),
    Field("runtime", "section", "Where the code is and what its processes get.",
          nullable=True, section=RUNTIME),
    Field("deployments", "section_list", "Options of its deployments, over those in the "
          "code.", nullable=True, section=DEPLOYMENT),
    Field("traffic", "section", "Traffic splitting and shadowing.", nullable=True,
          section=TRAFFIC),
    Field("require_token", "bool", "Only requests with a bearer token of the proxy's "
          "--http-tokens.", nullable=True),
    Field("grpc_servicer_functions", "str_list", "Import paths of its gRPC servicers' "
          "add_XServicer_to_server functions.", nullable=True, items="import paths"),
    Field("runtime_env", "section", "", nullable=True, section=RUNTIME_ENV,
          ray="read as the application's runtime"),
    Field("logging_config", "section", "", nullable=True, section=LOGGING, unused=_LOGS),
), exclusive=(("runtime", "runtime_env"),))

TOP = Section("config", "A servefleet config file (`servefleet deploy`, `servefleet up`), "
              "shaped like Ray Serve's `serve deploy` config.", (
    Field("http_options", "section", "HTTP settings.", nullable=True, section=HTTP),
    Field("grpc_options", "section", "gRPC ingress settings.", nullable=True, section=GRPC),
    Field("applications", "section_list", "The applications to run: those not listed are "
          "deleted by `servefleet deploy`.", required=True, section=APPLICATION),
    Field("proxy_location", "str", "", nullable=True, choices=PROXY_LOCATIONS,
          unused=_PROXIES),
    Field("logging_config", "section", "", nullable=True, section=LOGGING, unused=_LOGS),
    Field("target_capacity", "number", "", nullable=True, choices=(100,),
          ray="only 100: servefleet runs every application at full capacity"),
))
