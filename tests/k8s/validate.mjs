#!/usr/bin/env node
// Validates Kubernetes manifests (multi-document YAML) against the Kubernetes
// OpenAPI schema, as compiled into the kubernetes-models package, and strictly:
// the package's validators ignore fields the schema does not know (as the API
// server's non-strict decoding would drop them), so this script also records
// which fields the validator looked at and rejects every other one. A typo
// such as `imagePullPolicyy` therefore fails here, as it fails under
// `kubectl apply --validate=strict`.
//
// Usage: node validate.mjs [--expect-invalid] FILE|- ...
//   Every document must be valid; with --expect-invalid, every document must
//   be refused (the negative cases that prove the checks bite).
// Exit: 0 = as expected, 1 = not, 2 = usage or unreadable input.
import { readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";

const MODULES = {
  v1: "kubernetes-models/v1",
  "batch/v1": "kubernetes-models/batch/v1",
  "apps/v1": "kubernetes-models/apps/v1",
  "rbac.authorization.k8s.io/v1": "kubernetes-models/rbac.authorization.k8s.io/v1",
};

// Wraps `root` so that every property read is recorded per object.
function recording(root, seen) {
  const cache = new WeakMap();
  const wrap = (obj) => {
    if (obj === null || typeof obj !== "object") return obj;
    if (cache.has(obj)) return cache.get(obj);
    if (!seen.has(obj)) seen.set(obj, new Set());
    const p = new Proxy(obj, {
      get(target, key, receiver) {
        if (typeof key === "string") seen.get(target).add(key);
        return wrap(Reflect.get(target, key, receiver));
      },
    });
    cache.set(obj, p);
    return p;
  };
  return wrap(root);
}

// Fields of plain objects the validator never read: unknown to the schema.
function unknownFields(obj, seen, path, out) {
  if (Array.isArray(obj)) {
    obj.forEach((v, i) => unknownFields(v, seen, `${path}/${i}`, out));
  } else if (obj !== null && typeof obj === "object") {
    const read = seen.get(obj) ?? new Set();
    for (const [k, v] of Object.entries(obj)) {
      if (!read.has(k)) out.push(`${path}/${k}`);
      else unknownFields(v, seen, `${path}/${k}`, out);
    }
  }
}

async function validateDoc(doc) {
  if (doc === null || typeof doc !== "object" || Array.isArray(doc)) return ["the document is not a mapping"];
  const { apiVersion, kind } = doc;
  const modName = MODULES[apiVersion];
  if (!modName) return [`apiVersion '${apiVersion}' is not one this validator knows (${Object.keys(MODULES).join(", ")})`];
  const mod = await import(modName);
  const Model = mod[kind];
  if (typeof Model !== "function") return [`kind '${kind}' is not in ${apiVersion}`];
  const model = new Model(doc); // a deep copy; the validator reads it through the proxy
  const seen = new WeakMap();
  const errors = [];
  try {
    Model.prototype.validate.call(recording(model, seen));
  } catch (e) {
    errors.push(String(e.message ?? e));
  }
  const unknown = [];
  unknownFields(model, seen, "", unknown);
  for (const u of unknown) errors.push(`${u}: unknown field (not in the ${apiVersion} ${kind} schema)`);
  return errors;
}

async function main() {
  const args = process.argv.slice(2);
  const expectInvalid = args[0] === "--expect-invalid";
  const files = expectInvalid ? args.slice(1) : args;
  if (files.length === 0) {
    console.error("usage: node validate.mjs [--expect-invalid] FILE|- ...");
    process.exit(2);
  }
  let ok = true;
  let count = 0;
  for (const file of files) {
    let text;
    try {
      text = readFileSync(file === "-" ? 0 : file, "utf8");
    } catch (e) {
      console.error(`${file}: ${e.message}`);
      process.exit(2);
    }
    const docs = parseAllDocuments(text, { strict: true, uniqueKeys: true });
    for (const [i, d] of docs.entries()) {
      const where = `${file} document ${i + 1}`;
      if (d.errors.length > 0) {
        const msg = d.errors.map((e) => e.message).join("; ");
        if (expectInvalid) console.log(`${where}: refused as expected (YAML: ${msg})`);
        else {
          console.log(`${where}: INVALID YAML: ${msg}`);
          ok = false;
        }
        count++;
        continue;
      }
      const value = d.toJS();
      if (value === null || value === undefined) continue; // comments only
      count++;
      const label = `${where} (${value.kind ?? "?"} ${value.metadata?.name ?? "?"})`;
      const errors = await validateDoc(value);
      if (expectInvalid) {
        if (errors.length === 0) {
          console.log(`${label}: ACCEPTED, but it must be refused`);
          ok = false;
        } else {
          console.log(`${label}: refused as expected: ${errors.join("; ")}`);
        }
      } else if (errors.length > 0) {
        console.log(`${label}: INVALID: ${errors.join("; ")}`);
        ok = false;
      } else {
        console.log(`${label}: valid`);
      }
    }
  }
  if (count === 0) {
    console.log("no documents");
    ok = false;
  }
  process.exit(ok ? 0 : 1);
}

main().catch((e) => {
  console.error(e.stack ?? String(e));
  process.exit(2);
});
