#!/usr/bin/env python3
"""Writes the committed seed corpus from server/tests/fixtures: the
fixture reviews as they are, one review per workload kind (the fixture's
Deployment template under each adapter's layout), and API bodies."""
import copy, hashlib, json, os

here = os.path.dirname(os.path.abspath(__file__))
fixtures = os.path.join(here, "..", "server", "tests", "fixtures")

def load(name):
    with open(os.path.join(fixtures, name)) as f:
        return json.load(f)

def resolve(v):
    if isinstance(v, str) and v.startswith("@"):
        return load(v[1:])
    if isinstance(v, dict):
        return {k: resolve(x) for k, x in v.items()}
    if isinstance(v, list):
        return [resolve(x) for x in v]
    return v

def write(target, data):
    if isinstance(data, (dict, list)):
        data = json.dumps(data, separators=(",", ":"))
    if isinstance(data, str):
        data = data.encode()
    name = hashlib.sha1(data).hexdigest()
    os.makedirs(os.path.join(here, "corpus", target), exist_ok=True)
    with open(os.path.join(here, "corpus", target, name), "wb") as f:
        f.write(data)

for q in ["4", "500m", "16Gi", "1.5", ".5", "1e3", "-100", "+7", "12e-3", "3n", "1Ei",
          "9223372036854775807", "0.0000000001", "\"64Gi\"", "4", "0.5", "-1e18"]:
    write("quantity", q)

deployment = load("deployment.json")
tpl = deployment["spec"]["template"]
meta = deployment["metadata"]
kinds = [
    ("apps", "v1", "Deployment", "deployments", {"replicas": 2, "template": tpl}),
    ("apps", "v1", "StatefulSet", "statefulsets", {"replicas": 3, "template": tpl}),
    ("apps", "v1", "ReplicaSet", "replicasets", {"replicas": 1, "template": tpl}),
    ("argoproj.io", "v1alpha1", "Rollout", "rollouts", {"replicas": 2, "template": tpl}),
    ("batch", "v1", "Job", "jobs", {"parallelism": 4, "completions": 8, "suspend": False, "template": tpl}),
    ("batch", "v1", "CronJob", "cronjobs", {"schedule": "0 * * * *", "jobTemplate": {"spec": {"parallelism": 2, "template": tpl}}}),
    ("kubeflow.org", "v1", "TFJob", "tfjobs", {"tfReplicaSpecs": {"PS": {"replicas": 1, "template": tpl}, "Worker": {"replicas": 4, "template": tpl}}}),
    ("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs", {"runPolicy": {"suspend": False}, "pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": tpl}, "Worker": {"replicas": 3, "template": tpl}}}),
    ("kubeflow.org", "v2beta1", "MPIJob", "mpijobs", {"mpiReplicaSpecs": {"Launcher": {"replicas": 1, "template": tpl}, "Worker": {"replicas": 2, "template": tpl}}}),
    ("batch.volcano.sh", "v1alpha1", "Job", "jobs", {"minAvailable": 2, "tasks": [{"name": "ps", "replicas": 1, "template": tpl}, {"replicas": 2, "template": tpl}]}),
]
for fixture in sorted(os.listdir(fixtures)):
    review = resolve(load(fixture))
    if "request" in review:
        write("admission_review", review)
base = resolve(load("deployment-create.json"))
for group, version, kind, resource, spec in kinds:
    obj = {"apiVersion": f"{group}/{version}", "kind": kind, "metadata": meta, "spec": spec}
    review = copy.deepcopy(base)
    r = review["request"]
    r["kind"] = {"group": group, "version": version, "kind": kind}
    r["resource"] = {"group": group, "version": version, "resource": resource}
    r["object"] = obj
    write("admission_review", review)
    write("api_bodies", obj)
quota = resolve(load("quota-create.json"))["request"]["object"]
write("api_bodies", quota)
write("api_bodies", {"apiVersion": "bizrq.io/v1", "kind": "BizGroupResourceQuota",
    "metadata": {"name": "nlp-team"}, "spec": {"parent": "ai",
    "hard": {"requests.nvidia.com/gpu": "16", "cash/requests.nvidia.com/gpu": "1000"},
    "max": {"requests.nvidia.com/gpu": "24"}}})

# Strings no identifier holds (quota::text): NUL, other controls and
# bidirectional overrides in the username, groups, review uid, names,
# labels (gpu-type and cpu-type), an extra resource name and an owner's
# uid; and a clean review whose free text (an env value) holds an escape,
# which the webhook does not refuse.
hostile = ["\u0000", "\u001b[2J", "\u007f", "\u0085", "\u202e", "\u2066", "\n"]
def with_request(edit):
    review = copy.deepcopy(base)
    edit(review["request"])
    write("admission_review", review)
for i, bad in enumerate(hostile):
    with_request(lambda r: r["userInfo"].__setitem__("username", "alice" + bad))
    with_request(lambda r: r["userInfo"]["groups"].append("devs" + bad))
    with_request(lambda r: r.__setitem__("uid", "705ab4f5" + bad))
    with_request(lambda r: r.__setitem__("name", "train" + bad))
    labels = ["biz.group.resource.quota/gpu-type", "biz.group.resource.quota/cpu-type",
              "biz.group.resource.quota", "app"]
    label = labels[i % len(labels)]
    with_request(lambda r: r["object"]["metadata"]["labels"].__setitem__(label, "A100" + bad))
    with_request(lambda r: r["object"]["metadata"].__setitem__("name", "train" + bad))
    with_request(lambda r: r["object"]["spec"]["template"]["spec"]["containers"][0]
                 ["resources"]["requests"].__setitem__("example.com/f" + bad + "o", "1"))
    with_request(lambda r: r["object"]["metadata"].__setitem__(
        "ownerReferences", [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs",
                             "uid": "rs" + bad, "controller": True}]))
with_request(lambda r: r["object"]["spec"]["template"]["spec"]["containers"][0].__setitem__(
    "env", [{"name": "PS1", "value": "\u001b[31m$ "}]))
