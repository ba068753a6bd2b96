//! The portal's charts: pure functions from usage samples to inline SVG drawn
//! with plotters, and the exact cash forecast the burn-down shows.
//!
//! Quantities stay exact (`i128` nano-units, integer milliseconds) through
//! every decision; they become `f64` only on their way to a pixel. The SVG
//! has no XML declaration, a `viewBox` and `width="100%"`, so it can be
//! inlined in a page and scale with it; the same input gives the same bytes.
//!
//! Each chart is drawn in two [`Frame`]s, [`WIDE`] and [`NARROW`], and the
//! stylesheet shows the one that fits: a chart scaled down to a phone would
//! shrink its text below what people can read. A frame's text size is
//! chosen for the narrowest width the stylesheet shows it at, so its text
//! is never rendered smaller than 12 px. Titles are the page's headings,
//! not part of the picture, so they wrap on a phone instead of shrinking.
//!
//! The root `<svg>` carries where its time axis is drawn (`data-x0`,
//! `data-x1` in viewBox units, `data-t0`, `data-t1` in epoch ms), so a
//! pointer can be turned into a time without knowing plotters' layout.

mod burn_down;
mod children;
mod draw;
mod efficiency;
mod models;
mod report;
mod scale;
mod usage;

pub use burn_down::burn_down_chart;
pub use children::{children_chart, children_layers, layer_colour};
use draw::*;
pub use efficiency::efficiency_chart;
pub use models::{model_breakdown_chart, model_breakdown_title};
pub use report::report_chart;
use scale::*;
pub use usage::usage_chart;

use crate::layout::escape_text;
use plotters::coord::combinators::WithKeyPoints;
use plotters::coord::types::{RangedCoordf64, RangedCoordi64};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use quota::forecast::Sample;
use quota::keys::{self, Key, KeyConfig};
use quota::quantity::NANO;
use quota::series::Stack;
use quota::time::{civil_from_days, days_from_civil};
use quota::{resources, Quantity, ResourceList};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::error::Error;
use std::ops::Range;

const MS_PER_MIN: i64 = 60_000;
const MS_PER_HOUR: i64 = 3_600_000;
const MS_PER_DAY: i64 = 86_400_000;

/// How a key's amounts are shown: nano-units per display unit, and the
/// unit's name. Bytes show as GiB; cash keys are resource-hours. `cfg`
/// says which resources are GPUs (cards): the configured `--gpu-resources`.
pub fn unit_of(key: &str, cfg: &KeyConfig) -> (i128, &'static str) {
    const GIB: i128 = 1 << 30;
    let resource = Key::parse(key, cfg).map(|k| k.resource).unwrap_or_default();
    let (per, unit, cash_unit) = match resource.as_str() {
        "cpu" => (1, "cores", "core-hours"),
        "memory" | "ephemeral-storage" => (GIB, "GiB", "GiB-hours"),
        r if r.starts_with("hugepages-") => (GIB, "GiB", "GiB-hours"),
        "pods" => (1, "pods", "pod-hours"),
        r if cfg.is_gpu(r) => (1, "cards", "card-hours"),
        _ => (1, "units", "unit-hours"),
    };
    let cash = key.starts_with(keys::CASH_PREFIX);
    (per * NANO, if cash { cash_unit } else { unit })
}

/// An amount of `key` with its unit, for a value in a table or a readout:
/// `5 cards`, `64 GiB`, `12.5 card-hours` (two decimals at most, exact).
pub fn amount(key: &str, q: Quantity, cfg: &KeyConfig) -> String {
    let (per, unit) = unit_of(key, cfg);
    format!("{} {unit}", grouped(q.nanos(), per, 2))
}

// ---------------------------------------------------------------------------
// Forecast

/// A budget's sentence on the overview's cards, the quota page and under
/// its burn-down chart, from its one forecast (`quota::forecast::outlook`):
/// "GPU card-hours: 5,240 card-hours left · runs out in 8.3 days
/// (2026-12-07), burning 26 card-hours/h". The run-out words are
/// `Outlook::words`, the same on every page, the API and the alerts.
pub fn describe_outlook(o: &quota::forecast::Outlook, cfg: &KeyConfig) -> String {
    use quota::budget::runway::Runway;
    let k = &crate::key_name(&o.key, cfg);
    let amount = |q: Quantity| crate::display_quantity(&o.key, q, cfg);
    let left = o.left.nanos();
    // At a parent, what is left and what burns are its own work's, beside
    // its subtree's spending: say whose, and what went to its children.
    if !o.carved.is_zero() {
        let own = format!(
            "{k} for its own work ({} allocated to children)",
            amount(o.carved)
        );
        return match o.runway {
            Runway::Spent if left < 0 => format!(
                "{own}: run out, {} over budget",
                amount(Quantity::from_nanos(-left))
            ),
            Runway::Spent => format!("{own}: run out"),
            Runway::NotBurning => {
                format!("{own}: {} left, its own work not burning", amount(o.left))
            }
            Runway::Unknown => format!("{own}: {} left, no burn measured yet", amount(o.left)),
            Runway::Until { .. } | Runway::OutlastsPeriod { .. } => format!(
                "{own}: {} left · {}, its own work burning {}/h",
                amount(o.left),
                o.words(),
                amount(o.burn_per_hour)
            ),
        };
    }
    match o.runway {
        Runway::Spent if left < 0 => {
            format!(
                "{k} has run out: {} over budget",
                amount(Quantity::from_nanos(-left))
            )
        }
        Runway::Spent => format!("{k} has run out: budget spent"),
        Runway::NotBurning => format!("{k}: {} left, not burning", amount(o.left)),
        Runway::Unknown => format!("{k}: {} left, no burn measured yet", amount(o.left)),
        Runway::Until { .. } | Runway::OutlastsPeriod { .. } => format!(
            "{k}: {} left · {}, burning {}/h",
            amount(o.left),
            o.words(),
            amount(o.burn_per_hour)
        ),
    }
}

// ---------------------------------------------------------------------------
// Charts

/// The size a chart is drawn at (viewBox units) and its text size.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Frame {
    pub w: u32,
    pub h: u32,
    /// Text size in viewBox units.
    pub text_px: f64,
}

/// Shown where the chart is at least 760 px wide (style/bizrq.css: wider
/// than 800 px screens, up to 960 px): 13 px text renders at 13–16 px.
pub const WIDE: Frame = Frame {
    w: 760,
    h: 300,
    text_px: 13.0,
};

/// Shown on screens up to 800 px, at most 480 px wide: on a 320 px phone
/// (300 px of chart) 14.5 px text renders at 12 px, at 480 px at 19 px.
pub const NARROW: Frame = Frame {
    w: 360,
    h: 280,
    text_px: 14.5,
};

impl Frame {
    /// plotters' font size for this frame's text: its SVG backend writes a
    /// font of size `s` as `s / 1.24` px.
    fn size(&self) -> f64 {
        self.text_px * 1.24
    }

    fn font(&self, colour: RGBColor) -> TextStyle<'static> {
        font(self.size(), colour)
    }

    /// Rough width of `text` in viewBox units (no font metrics without ttf).
    fn text_w(&self, text: &str) -> i32 {
        (text.chars().count() as f64 * self.text_px * 0.58).ceil() as i32
    }

    fn line_h(&self) -> i32 {
        (self.text_px * 1.6).ceil() as i32
    }
}

/// A chart in both frames, for a `<figure>`: the stylesheet shows one.
pub fn both(draw: impl Fn(Frame) -> String) -> String {
    let wide = draw(WIDE).replacen("class=\"chart ", "class=\"chart wide ", 1);
    let narrow = draw(NARROW).replacen("class=\"chart ", "class=\"chart narrow ", 1);
    format!("{wide}{narrow}")
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod samples_out;
