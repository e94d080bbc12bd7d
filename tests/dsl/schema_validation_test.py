#!/usr/bin/python3
"""docs/template.schema.json, checked by an independent validator (python3-jsonschema):
the shipped templates validate against it, and templates the linter rejects for their shape
do not. Run from the repository root."""
import glob
import json
import sys

import jsonschema
import yaml

schema = json.load(open("docs/template.schema.json"))
jsonschema.Draft202012Validator.check_schema(schema)
validator = jsonschema.Draft202012Validator(schema)

failures = []
templates = sorted(glob.glob("templates/*.yaml"))
if len(templates) < 4:
    failures.append("expected the four shipped templates, found %d" % len(templates))
for path in templates:
    errors = list(validator.iter_errors(yaml.safe_load(open(path))))
    for e in errors:
        failures.append("%s should validate: %s at %s" % (path, e.message, list(e.absolute_path)))

# Golden cases whose findings are about shape must fail the schema too.
for name in ["unknown-key", "wrong-type", "missing-key", "invalid-value"]:
    path = "tests/dsl/golden/%s.yaml" % name
    if validator.is_valid(yaml.safe_load(open(path))):
        failures.append("%s should not validate against the schema" % path)

for f in failures:
    print("FAIL:", f)
print("%d templates checked, %d failures" % (len(templates), len(failures)))
sys.exit(1 if failures else 0)
