use serde_json::json;

use super::group::proc_stat_group;
use super::trainer::OutputTail;
use super::*;

#[test]
fn hydra_values_are_quoted_the_way_hydra_reads_them() {
    assert_eq!(hydra_value(&json!(null)), "null");
    assert_eq!(hydra_value(&json!(true)), "true");
    assert_eq!(hydra_value(&json!(16)), "16");
    assert_eq!(hydra_value(&json!(1.0)), "1.0");
    assert_eq!(hydra_value(&json!(1.0e-6)), "1e-6");
    assert_eq!(hydra_value(&json!(0.95)), "0.95");
    assert_eq!(hydra_value(&json!("Qwen/Qwen3-0.6B")), "'Qwen/Qwen3-0.6B'");
    assert_eq!(hydra_value(&json!("5")), "'5'");
    assert_eq!(hydra_value(&json!([0.9, 0.95])), "[0.9,0.95]");
    assert_eq!(
        hydra_value(&json!(["console", "file"])),
        "['console','file']"
    );
    assert_eq!(hydra_value(&json!({"a": 1, "b": "x"})), "{a:1,b:'x'}");
    assert_eq!(hydra_value(&json!({})), "{}");
}

#[test]
fn hydra_quoting_escapes_quotes_backslashes_and_interpolations() {
    assert_eq!(hydra_quote("it's"), r"'it\'s'");
    assert_eq!(hydra_quote(r"a\b"), r"'a\b'");
    assert_eq!(hydra_quote(r"ends\"), r"'ends\\'");
    assert_eq!(hydra_quote(r"x\'y"), r"'x\\\'y'");
    assert_eq!(hydra_quote("${oc.env:HOME}"), r"'\${oc.env:HOME}'");
    assert_eq!(hydra_quote("a, b = [c]"), "'a, b = [c]'");
    // A literal backslash before `${`: doubled, then the escaped interpolation.
    assert_eq!(hydra_quote(r"a\${x}"), r"'a\\\${x}'");
    assert_eq!(hydra_quote("cost $5 {x}"), "'cost $5 {x}'");
}

#[test]
fn proc_stat_parsing_survives_odd_command_names() {
    assert_eq!(
        proc_stat_group("123 (a) b) c) S 1 77 77 0"),
        Some(('S', 77))
    );
    assert_eq!(proc_stat_group("123 (x) Z 1 5 5"), Some(('Z', 5)));
    assert_eq!(proc_stat_group("garbage"), None);
    assert!(!group_alive(0));
}

#[test]
fn output_tail_keeps_the_last_lines() {
    let mut t = OutputTail::default();
    for i in 0..(TAIL_LINES + 10) {
        t.push(&format!("line {i}"));
        t.push("   ");
    }
    assert_eq!(t.lines.len(), TAIL_LINES);
    assert_eq!(t.lines.front().map(String::as_str), Some("line 10"));
}
