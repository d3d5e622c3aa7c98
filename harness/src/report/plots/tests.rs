use super::*;

#[test]
fn tick_labels_tell_neighbours_apart_at_any_scale() {
    // A learning rate: 0 then 1e-6 (the issue's `0.0` on every tick).
    let (lo, hi) = y_range([0.0, 1e-6].into_iter());
    let ticks: Vec<String> = (0..=5)
        .map(|i| tick_label(i as f64 * 2e-7, lo, hi))
        .collect();
    assert_eq!(ticks, ["0", "2e-7", "4e-7", "6e-7", "8e-7", "1e-6"]);
    assert_eq!(tick_label(1.2e-6, 0.0, 2e-6), "1.2e-6");
    // A small KL: 1e-4 around 3e-4.
    assert_eq!(tick_label(3.1e-4, 2e-4, 4e-4), "3.1e-4");
    assert_eq!(tick_label(0.285, 0.28, 0.32), "0.285");
    assert_eq!(tick_label(0.3, 0.0, 1.0), "0.3");
    assert_eq!(tick_label(12.0, 0.0, 40.0), "12");
    assert_eq!(tick_label(2.5e6, 0.0, 5e6), "2.5e6");
    assert_eq!(tick_label(-0.0, -1.0, 1.0), "0");
    assert_eq!(tick_label(1e-17, -1.0, 1.0), "0");
}

fn window(first: u64, last: u64, value: Option<f64>) -> PointCheck {
    PointCheck {
        first,
        last,
        value,
        golden: Some(0.5),
        band: crate::judge::Band {
            lo: Some(0.4),
            hi: Some(0.6),
        },
        status: RuleStatus::Pass,
        centre: None,
    }
}

/// A shape of a plot read back: the groups it is in (`class` or `class:name`), its tag,
/// its attributes and its text.
#[derive(Debug)]
struct Shape {
    groups: Vec<String>,
    tag: String,
    attrs: std::collections::BTreeMap<String, String>,
    text: String,
}

impl Shape {
    fn in_group(&self, g: &str) -> bool {
        self.groups.iter().any(|x| x == g)
    }

    /// The x coordinates the shape covers.
    fn xs(&self) -> Vec<f64> {
        let a = |k: &str| self.attrs.get(k).and_then(|v| v.parse::<f64>().ok());
        match self.tag.as_str() {
            "polyline" => self.attrs["points"]
                .split_whitespace()
                .filter_map(|p| p.split(',').next()?.parse().ok())
                .collect(),
            "line" => [a("x1"), a("x2")].into_iter().flatten().collect(),
            "circle" => a("cx").into_iter().collect(),
            "rect" => match (a("x"), a("width")) {
                (Some(x), Some(w)) => vec![x, x + w],
                _ => Vec::new(),
            },
            _ => a("x").into_iter().collect(),
        }
    }
}

fn read_svg(svg: &str) -> Vec<Shape> {
    use quick_xml::events::Event;
    let mut reader = quick_xml::Reader::from_str(svg);
    let (mut groups, mut out) = (Vec::new(), Vec::<Shape>::new());
    loop {
        match reader.read_event().unwrap() {
            Event::Start(e) | Event::Empty(e) if e.name().as_ref() == b"svg" => {}
            Event::Start(e) | Event::Empty(e) => {
                let attrs: std::collections::BTreeMap<String, String> = e
                    .attributes()
                    .map(|a| {
                        let a = a.unwrap();
                        (
                            String::from_utf8(a.key.as_ref().to_vec()).unwrap(),
                            a.normalized_value(quick_xml::XmlVersion::Implicit1_0)
                                .unwrap()
                                .into_owned(),
                        )
                    })
                    .collect();
                let tag = String::from_utf8(e.name().as_ref().to_vec()).unwrap();
                if tag == "g" {
                    let mut g = attrs["class"].clone();
                    if let Some(n) = attrs.get("data-series") {
                        g = format!("{g}:{n}");
                    }
                    groups.push(g);
                } else {
                    out.push(Shape {
                        groups: groups.clone(),
                        tag,
                        attrs,
                        text: String::new(),
                    });
                }
            }
            Event::End(e) if e.name().as_ref() == b"g" => {
                groups.pop();
            }
            Event::Text(t) => {
                if let Some(last) = out.last_mut() {
                    last.text.push_str(t.decode().unwrap().trim());
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    out
}

fn failing_window(first: u64, last: u64, value: f64) -> PointCheck {
    PointCheck {
        status: RuleStatus::Regressed,
        ..window(first, last, Some(value))
    }
}

/// The complaints, one by one, on a windowed reward whose second window fails.
#[test]
fn plots_read_at_a_glance() {
    let run: Vec<(u64, f64)> = (1..=10).map(|s| (s, 0.1 * s as f64)).collect();
    let golden: Vec<(u64, f64)> = (1..=10).map(|s| (s, 0.1 * s as f64 + 0.05)).collect();
    let points = [window(1, 5, Some(0.3)), failing_window(6, 10, 0.8)];
    let metric = "critic/rewards/mean";
    let svg = plot_metric(metric, &run, Some(("golden", &golden)), &points, &[]);
    let shapes = read_svg(&svg);
    let drawn = |g: &str| {
        shapes
            .iter()
            .filter(|s| s.in_group(&format!("series:{g}")))
            .count()
    };
    // Every series is drawn and named: the run, the golden, the judged window values (the
    // windowed rule judged them, not the steps), the failing window.
    for g in [RUN_SERIES, "golden", WINDOW_SERIES, FAILING_SERIES] {
        assert!(drawn(g) > 0, "series {g} not drawn:\n{svg}");
    }
    // The legend sits right of every data series, not over their last steps.
    let xs = |pick: &dyn Fn(&Shape) -> bool| -> Vec<f64> {
        shapes
            .iter()
            .filter(|s| pick(s))
            .flat_map(Shape::xs)
            .collect()
    };
    let legend = xs(&|s| s.in_group("legend"));
    let data = xs(&|s| s.groups.iter().any(|g| g.starts_with("series:")));
    assert!(!legend.is_empty() && !data.is_empty());
    let legend_left = legend.iter().copied().fold(f64::INFINITY, f64::min);
    let data_right = data.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    assert!(data_right < legend_left, "{data_right} >= {legend_left}");
    // The y axis is labelled with the metric (rotated along it).
    assert!(
        shapes.iter().any(|s| s.tag == "text"
            && s.text == metric
            && s.attrs
                .get("transform")
                .is_some_and(|t| t.contains("rotate"))),
        "{svg}"
    );
    // The same input draws the same SVG.
    assert_eq!(
        svg,
        plot_metric(metric, &run, Some(("golden", &golden)), &points, &[])
    );
}

/// A learning rate of 1e-6 used to tick as `0.0` all the way up.
#[test]
fn small_values_tick_apart() {
    let lr: Vec<(u64, f64)> = (1..=6)
        .map(|s| (s, if s == 1 { 0.0 } else { 1e-6 }))
        .collect();
    let svg = plot_metric("actor/lr", &lr, None, &[], &[]);
    let ticks: Vec<String> = read_svg(&svg)
        .into_iter()
        .filter(|s| {
            s.in_group("axes")
                && s.tag == "text"
                && s.attrs.get("text-anchor").map(String::as_str) == Some("end")
                && !s.attrs.contains_key("transform")
        })
        .map(|s| s.text)
        .collect();
    assert!(ticks.len() >= 4, "{ticks:?}");
    let mut unique = ticks.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), ticks.len(), "repeated tick labels: {ticks:?}");
    assert!(ticks.contains(&"1e-6".to_string()), "{ticks:?}");
}

#[test]
fn window_values_make_a_step_line() {
    let points = [
        window(1, 5, Some(0.1)),
        window(6, 10, Some(0.3)),
        window(11, 15, None),
        window(16, 20, Some(0.9)),
    ];
    let lines = window_steps(&points, |v| v.min(0.8));
    assert_eq!(
        lines,
        vec![
            vec![(0.5, 0.1), (5.5, 0.1), (5.5, 0.3), (10.5, 0.3)],
            vec![(15.5, 0.8), (20.5, 0.8)],
        ]
    );
}
