//! The knob propagation checker: manifests, wire diffs, verdicts, the matrix.
