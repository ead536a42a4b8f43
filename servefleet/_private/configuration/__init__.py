"""What users write to configure servefleet, checked in one place.

- `config_file`, `config_fields`, `config_schema`, `config_docs`: the YAML
  config file, its key table, its JSON Schema and its reference page;
- `crd`: the ServeApplication CRD (Kubernetes), written from that schema;
- `options`, `option_fields`, `option_checks`, `option_notes`,
  `field_table`: a deployment's options, their table and their checks;
- `ray_config`, `ray_options`, `ray_runtime_env`, `import_paths`: Ray
  Serve's keys, options and import paths in servefleet's terms.

The floor of the SDK: it reads no other room.

May import: nothing (only _private's top-level modules).
"""
