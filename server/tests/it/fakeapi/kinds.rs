//! The kinds the fake API server serves, as discovery describes them.

#[derive(Clone, Debug)]
pub struct KindDef {
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
    pub namespaced: bool,
    /// Status is a subresource: the main PUT keeps it, `/status` writes only it.
    pub status: bool,
    /// Has a `/scale` subresource (GET/PUT/PATCH map to spec.replicas).
    pub scale: bool,
}

pub const KINDS: &[KindDef] = &[
    // bizrq's queue mark keys (`--queue-mark-key-secret`).
    KindDef {
        group: "",
        version: "v1",
        kind: "Secret",
        plural: "secrets",
        namespaced: true,
        status: false,
        scale: false,
    },
    KindDef {
        group: "",
        version: "v1",
        kind: "Pod",
        plural: "pods",
        namespaced: true,
        status: true,
        scale: false,
    },
    KindDef {
        group: "apps",
        version: "v1",
        kind: "Deployment",
        plural: "deployments",
        namespaced: true,
        status: true,
        scale: true,
    },
    KindDef {
        group: "apps",
        version: "v1",
        kind: "StatefulSet",
        plural: "statefulsets",
        namespaced: true,
        status: true,
        scale: true,
    },
    KindDef {
        group: "apps",
        version: "v1",
        kind: "ReplicaSet",
        plural: "replicasets",
        namespaced: true,
        status: true,
        scale: true,
    },
    KindDef {
        group: "batch",
        version: "v1",
        kind: "Job",
        plural: "jobs",
        namespaced: true,
        status: true,
        scale: false,
    },
    KindDef {
        group: "batch",
        version: "v1",
        kind: "CronJob",
        plural: "cronjobs",
        namespaced: true,
        status: true,
        scale: false,
    },
    KindDef {
        group: "autoscaling",
        version: "v2",
        kind: "HorizontalPodAutoscaler",
        plural: "horizontalpodautoscalers",
        namespaced: true,
        status: true,
        scale: false,
    },
    KindDef {
        group: "bizrq.io",
        version: "v1",
        kind: "BizGroupResourceQuota",
        plural: "bizgroupresourcequotas",
        namespaced: false,
        status: true,
        scale: false,
    },
    KindDef {
        group: "bizrq.io",
        version: "v1",
        kind: "PriceList",
        plural: "pricelists",
        namespaced: false,
        status: false,
        scale: false,
    },
    KindDef {
        group: "coordination.k8s.io",
        version: "v1",
        kind: "Lease",
        plural: "leases",
        namespaced: true,
        status: false,
        scale: false,
    },
    KindDef {
        group: "scheduling.k8s.io",
        version: "v1",
        kind: "PriorityClass",
        plural: "priorityclasses",
        namespaced: false,
        status: false,
        scale: false,
    },
    KindDef {
        group: "events.k8s.io",
        version: "v1",
        kind: "Event",
        plural: "events",
        namespaced: true,
        status: false,
        scale: false,
    },
];

/// Installed only when a test says so (a CRD installed later).
pub const PYTORCHJOB: KindDef = KindDef {
    group: "kubeflow.org",
    version: "v1",
    kind: "PyTorchJob",
    plural: "pytorchjobs",
    namespaced: true,
    status: true,
    // As Kubeflow's CRD has it (its Worker replicas); the fake maps a scale
    // to spec.replicas, which only matters if bizrq let one through.
    scale: true,
};

/// JobSet (`jobset.x-k8s.io/v1alpha2`), installed only when a test says
/// so, as its CRD has it: a status subresource, no scale.
pub const JOBSET: KindDef = KindDef {
    group: "jobset.x-k8s.io",
    version: "v1alpha2",
    kind: "JobSet",
    plural: "jobsets",
    namespaced: true,
    status: true,
    scale: false,
};

/// Volcano Job (`batch.volcano.sh/v1alpha1`), installed only when a test
/// says so, as its CRD has it: a status subresource, no scale, no suspend.
pub const VOLCANOJOB: KindDef = KindDef {
    group: "batch.volcano.sh",
    version: "v1alpha1",
    kind: "Job",
    plural: "jobs",
    namespaced: true,
    status: true,
    scale: false,
};
