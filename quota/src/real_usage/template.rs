//! What bizrq asks Prometheus: one PromQL template per metric, with
//! documented defaults (the NVIDIA DCGM exporter for GPUs, cAdvisor for
//! CPU and memory) that a cluster labelling otherwise replaces. Each
//! template is evaluated once per reading for every pod at once (never
//! once per pod), as a range query with a step, and must answer one series
//! per pod labelled `namespace` and `pod`, in the metric's unit.

use std::fmt;

/// The metrics bizrq reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Metric {
    /// Busy GPU cards of a pod: 0 to its cards (two cards at 50 % = 1).
    GpuBusy,
    /// Framebuffer memory in use, bytes.
    GpuMemory,
    /// CPU in use, cores.
    Cpu,
    /// Memory in use (the working set), bytes.
    Memory,
}

impl Metric {
    pub const ALL: [Metric; 4] = [
        Metric::GpuBusy,
        Metric::GpuMemory,
        Metric::Cpu,
        Metric::Memory,
    ];

    /// Its name in flags, metrics and logs.
    pub fn name(self) -> &'static str {
        match self {
            Metric::GpuBusy => "gpu_busy",
            Metric::GpuMemory => "gpu_memory",
            Metric::Cpu => "cpu",
            Metric::Memory => "memory",
        }
    }

    /// The unit a template must answer in.
    pub fn unit(self) -> &'static str {
        match self {
            Metric::GpuBusy => "busy cards",
            Metric::GpuMemory | Metric::Memory => "bytes",
            Metric::Cpu => "cores",
        }
    }

    /// The default template (docs/real-usage.md).
    pub fn default_template(self) -> &'static str {
        match self {
            // DCGM_FI_DEV_GPU_UTIL is 0–100 per card: their sum over a
            // pod's cards, over 100, is its busy cards. With the
            // profiling metrics: sum by (namespace, pod)
            // (DCGM_FI_PROF_GR_ENGINE_ACTIVE{pod!=""}), already 0–1 per card.
            Metric::GpuBusy => r#"sum by (namespace, pod) (DCGM_FI_DEV_GPU_UTIL{pod!=""}) / 100"#,
            // DCGM_FI_DEV_FB_USED is in MiB.
            Metric::GpuMemory => {
                r#"sum by (namespace, pod) (DCGM_FI_DEV_FB_USED{pod!=""}) * 1048576"#
            }
            Metric::Cpu => {
                r#"sum by (namespace, pod) (rate(container_cpu_usage_seconds_total{container!="",pod!=""}[${range}]))"#
            }
            Metric::Memory => {
                r#"sum by (namespace, pod) (container_memory_working_set_bytes{container!="",pod!=""})"#
            }
        }
    }

    /// The largest value one pod may report, in nano-units: beyond it a
    /// point is absurd (a counter reset read as a rate, an exporter's
    /// bug) and dropped. A pod busier than the cards it holds is checked
    /// against them when measured (`measure`).
    pub fn absurd_above(self) -> i128 {
        const UNIT: i128 = crate::quantity::NANO;
        const TIB: i128 = 1 << 40;
        match self {
            Metric::GpuBusy => 1024 * UNIT,
            Metric::GpuMemory => 1024 * TIB * UNIT,
            Metric::Cpu => 100_000 * UNIT,
            Metric::Memory => 1024 * TIB * UNIT,
        }
    }
}

impl fmt::Display for Metric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A checked template: PromQL with the placeholder `${range}`, the
/// window of a `rate()` (`--prometheus-rate-range-seconds`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template(String);

/// The longest template accepted.
pub const MAX_TEMPLATE: usize = 4096;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("the {0} query is empty")]
    Empty(Metric),
    #[error("the {0} query is longer than {MAX_TEMPLATE} characters")]
    TooLong(Metric),
    #[error("the {0} query holds {1}: a query is one line of PromQL")]
    Hostile(Metric, String),
    #[error("the {0} query names the placeholder '{1}'; the only one is ${{range}}")]
    UnknownPlaceholder(Metric, String),
}

impl Template {
    pub fn parse(metric: Metric, text: &str) -> Result<Template, TemplateError> {
        let t = text.trim();
        if t.is_empty() {
            return Err(TemplateError::Empty(metric));
        }
        if t.len() > MAX_TEMPLATE {
            return Err(TemplateError::TooLong(metric));
        }
        if let Some(c) = crate::text::hostile_char(t) {
            return Err(TemplateError::Hostile(metric, crate::text::describe(c)));
        }
        let mut rest = t;
        while let Some(i) = rest.find("${") {
            let after = &rest[i + 2..];
            let name = after.split('}').next().unwrap_or(after);
            if name != "range" || !after.contains('}') {
                return Err(TemplateError::UnknownPlaceholder(
                    metric,
                    format!("${{{}", name.chars().take(32).collect::<String>()),
                ));
            }
            rest = &after[name.len() + 1..];
        }
        Ok(Template(t.to_string()))
    }

    pub fn default_for(metric: Metric) -> Template {
        Template(metric.default_template().to_string())
    }

    /// The query, with `${range}` as `range_seconds` (`120s`).
    pub fn render(&self, range_seconds: u64) -> String {
        self.0.replace("${range}", &format!("{range_seconds}s"))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_default_parses_and_renders_its_range() {
        for m in Metric::ALL {
            let t = Template::parse(m, m.default_template()).unwrap();
            assert_eq!(t, Template::default_for(m));
            assert!(!t.render(120).contains("${"), "{m}");
        }
        assert!(Template::default_for(Metric::Cpu)
            .render(120)
            .contains("[120s]"));
    }

    #[test]
    fn a_bad_template_is_refused_with_its_reason() {
        let m = Metric::GpuBusy;
        assert_eq!(Template::parse(m, "  "), Err(TemplateError::Empty(m)));
        assert_eq!(
            Template::parse(m, &"x".repeat(5000)),
            Err(TemplateError::TooLong(m))
        );
        assert!(matches!(
            Template::parse(m, "up\n; drop"),
            Err(TemplateError::Hostile(..))
        ));
        assert_eq!(
            Template::parse(m, "rate(x[${window}])")
                .unwrap_err()
                .to_string(),
            "the gpu_busy query names the placeholder '${window'; the only one is ${range}"
        );
        assert!(Template::parse(m, "rate(x[${range").is_err());
        assert!(Template::parse(m, r#"sum by (namespace, pod) (x{pod!=""})"#).is_ok());
    }
}
