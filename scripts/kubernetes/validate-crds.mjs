// Validates ServiceMonitor and PrometheusRule documents against the
// prometheus-operator CRD schemas shipped in @kubernetes-models/prometheus-operator.
// Usage: node validate-crds.mjs <dir with node_modules> <file.yaml>...
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [modules, ...files] = process.argv.slice(2);
// Imported by path: the packages live in a cache outside the repository.
const load = (p) => import(pathToFileURL(join(modules, "node_modules", p)).href);
const yaml = (await load("js-yaml/dist/js-yaml.mjs")).default;
const v1 = "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1";
const models = {
  ServiceMonitor: (await load(`${v1}/ServiceMonitor.js`)).ServiceMonitor,
  PrometheusRule: (await load(`${v1}/PrometheusRule.js`)).PrometheusRule,
};

let failed = 0;
for (const file of files) {
  for (const doc of yaml.loadAll(readFileSync(file, "utf8")).filter(Boolean)) {
    const Model = models[doc.kind];
    const name = `${file}: ${doc.kind}/${doc.metadata?.name}`;
    if (doc.apiVersion !== "monitoring.coreos.com/v1" || !Model) {
      console.log(`ERROR ${name}: not a monitoring.coreos.com/v1 ServiceMonitor or PrometheusRule`);
      failed++;
      continue;
    }
    try {
      new Model(doc).validate();
      console.log(`INFO ${name} passed`);
    } catch (e) {
      console.log(`ERROR ${name}: ${e.message}`);
      failed++;
    }
  }
}
process.exit(failed ? 1 : 0);
