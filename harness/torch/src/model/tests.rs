use super::*;

#[test]
fn incremental_decoding_matches_the_full_forward() {
    tch::manual_seed(3);
    let m = Decoder::new_random(DecoderConfig::tiny(), Device::Cpu, Kind::Float);
    let _g = tch::no_grad_guard();
    // One left-padded row, one full row.
    let ids = Tensor::from_slice2(&[[0i64, 0, 5, 6, 7, 8], [4, 5, 6, 7, 8, 9]]);
    let mask = ids.ne(0).to_kind(Kind::Int64);
    let pos = (mask.cumsum(1, Kind::Int64) - 1).clamp_min(0);
    let full = m.hidden_states(&ids, &pos, Some(&mask));
    let mut cache = m.new_cache(2, 6);
    let _ = m.extend(
        &mut cache,
        &ids.narrow(1, 0, 4),
        &pos.narrow(1, 0, 4),
        &mask,
    );
    let _ = m.extend(
        &mut cache,
        &ids.narrow(1, 4, 1),
        &pos.narrow(1, 4, 1),
        &mask,
    );
    let last = m.extend(
        &mut cache,
        &ids.narrow(1, 5, 1),
        &pos.narrow(1, 5, 1),
        &mask,
    );
    let diff = (full.select(1, 5) - last).abs().max().double_value(&[]);
    assert!(diff < 1e-5, "{diff}");
}

#[test]
fn fused_paths_have_the_plain_gradients() {
    tch::manual_seed(5);
    let mut plain = Decoder::new_random(DecoderConfig::tiny(), Device::Cpu, Kind::Float);
    let mut fused = plain.deep_copy();
    fused.fused = true;
    plain.set_requires_grad(true);
    fused.set_requires_grad(true);
    let ids = Tensor::from_slice2(&[[3i64, 4, 5, 6, 7, 8], [4, 5, 6, 7, 8, 9]]);
    let pos = Tensor::arange(6, (Kind::Int64, Device::Cpu))
        .view([1, 6])
        .repeat([2, 1]);
    let probe = Tensor::randn(
        [2, 6, plain.config.hidden as i64],
        (Kind::Float, Device::Cpu),
    );
    for m in [&plain, &fused] {
        (m.hidden_states(&ids, &pos, None) * &probe)
            .sum(Kind::Float)
            .backward();
    }
    for (k, (a, b)) in plain.params.iter().zip(&fused.params).enumerate() {
        let (ga, gb) = (a.grad(), b.grad());
        assert!(ga.defined() && gb.defined(), "{}", plain.names[k]);
        let scale = ga.abs().max().double_value(&[]).max(1e-3);
        let diff = (ga - gb).abs().max().double_value(&[]) / scale;
        assert!(diff < 1e-4, "{}: {diff}", plain.names[k]);
    }
}

#[test]
fn fused_paths_agree_with_the_plain_composition() {
    tch::manual_seed(4);
    let plain = Decoder::new_random(DecoderConfig::tiny(), Device::Cpu, Kind::Float);
    let mut fused = plain.deep_copy();
    fused.fused = true;
    let ids = Tensor::from_slice2(&[[0i64, 0, 5, 6, 7, 8], [4, 5, 6, 7, 8, 9]]);
    let mask = ids.ne(0).to_kind(Kind::Int64);
    let pos = (mask.cumsum(1, Kind::Int64) - 1).clamp_min(0);
    let _g = tch::no_grad_guard();
    // Padding states are don't-cares; the real positions must agree.
    let real = mask.to_kind(Kind::Float).unsqueeze(-1);
    for key_mask in [Some(&mask), None] {
        let a = plain.hidden_states(&ids, &pos, key_mask);
        let b = fused.hidden_states(&ids, &pos, key_mask);
        let diff = ((a - b) * &real).abs().max().double_value(&[]);
        assert!(diff < 1e-5, "{diff}");
    }
    // Right padding too (a response shorter than the batch's), and a row with a hole,
    // which must take the masked path.
    let ids2 = Tensor::from_slice2(&[[0i64, 5, 6, 7, 0, 0], [4, 0, 6, 7, 8, 9]]);
    let mask2 = ids2.ne(0).to_kind(Kind::Int64);
    let pos2 = (mask2.cumsum(1, Kind::Int64) - 1).clamp_min(0);
    assert!(leading_padding(&mask2).is_none());
    assert_eq!(
        Vec::<i64>::try_from(leading_padding(&mask2.narrow(0, 0, 1)).unwrap()).unwrap(),
        vec![1]
    );
    let real2 = mask2.to_kind(Kind::Float).unsqueeze(-1);
    let a = plain.hidden_states(&ids2, &pos2, Some(&mask2));
    let b = fused.hidden_states(&ids2, &pos2, Some(&mask2));
    assert!(((a - b) * &real2).abs().max().double_value(&[]) < 1e-5);
    let one = ids2.narrow(0, 0, 1);
    let (m1, p1) = (mask2.narrow(0, 0, 1), pos2.narrow(0, 0, 1));
    let a = plain.hidden_states(&one, &p1, Some(&m1));
    let b = fused.hidden_states(&one, &p1, Some(&m1));
    let r1 = m1.to_kind(Kind::Float).unsqueeze(-1);
    assert!(((a - b) * &r1).abs().max().double_value(&[]) < 1e-5);
    // A cache with room to spare: the fused path attends over all of it, masked.
    let room = Tensor::cat(
        &[&mask, &Tensor::ones([2, 3], (Kind::Int64, Device::Cpu))],
        1,
    );
    let (mut ca, mut cb) = (plain.new_cache(2, 9), fused.new_cache(2, 9));
    let a = plain.extend(&mut ca, &ids, &pos, &room);
    let b = fused.extend(&mut cb, &ids, &pos, &room);
    assert!((a - b).abs().max().double_value(&[]) < 1e-5);
    let next = Tensor::from_slice2(&[[3i64], [2]]);
    let npos = Tensor::from_slice2(&[[4i64], [6]]);
    let a = plain.extend(&mut ca, &next, &npos, &room);
    let b = fused.extend(&mut cb, &next, &npos, &room);
    assert!((a - b).abs().max().double_value(&[]) < 1e-5);
}

#[test]
fn weights_concatenated_once_give_the_bits_of_the_per_call_concatenation() {
    tch::manual_seed(8);
    let mut fused = Decoder::new_random(DecoderConfig::tiny(), Device::Cpu, Kind::Float);
    fused.fused = true;
    let decoding = fused.for_decoding();
    assert!(decoding.fused_weights.is_some());
    let _g = tch::no_grad_guard();
    let ids = Tensor::from_slice2(&[[3i64, 1, 5, 6], [4, 5, 6, 7]]);
    let pos = Tensor::arange(4, (Kind::Int64, Device::Cpu)).repeat([2, 1]);
    let mask = Tensor::ones([2, 4], (Kind::Int64, Device::Cpu));
    let a = fused.extend(&mut fused.new_cache(2, 4), &ids, &pos, &mask);
    let b = decoding.extend(&mut decoding.new_cache(2, 4), &ids, &pos, &mask);
    assert!(a.equal(&b));
}

#[test]
fn decode_step_computes_what_extend_computes() {
    // The graph-capturable step (device-side position, bucketed attention) against
    // `extend` one token at a time, on the fused path: same kernels, same bits. Buckets of
    // 2 positions make the attended length change from step to step.
    tch::manual_seed(6);
    let mut fused = Decoder::new_random(DecoderConfig::tiny(), Device::Cpu, Kind::Float);
    fused.fused = true;
    let _g = tch::no_grad_guard();
    let ids = Tensor::from_slice2(&[[0i64, 0, 5, 6], [4, 5, 6, 7]]);
    let prompt_mask = ids.ne(0).to_kind(Kind::Int64);
    let pos = (prompt_mask.cumsum(1, Kind::Int64) - 1).clamp_min(0);
    let cap = 9;
    let key_mask = Tensor::cat(
        &[
            &prompt_mask,
            &Tensor::ones([2, cap - 4], (Kind::Int64, Device::Cpu)),
        ],
        1,
    );
    let (mut ca, mut cb) = (fused.new_cache(2, cap), fused.new_cache(2, cap));
    ca.bucket = 2;
    cb.bucket = 2;
    let a = fused.extend(&mut ca, &ids, &pos, &key_mask);
    let b = fused.extend(&mut cb, &ids, &pos, &key_mask);
    assert!(a.equal(&b));
    let next_pos = Tensor::from_slice2(&[[2i64], [4]]);
    let mut inp = DecodeInputs::new(&key_mask, &next_pos, 4);
    let mut lens = Vec::new();
    for (step, toks) in [[3i64, 9], [7, 1], [2, 2], [8, 8], [1, 3]]
        .iter()
        .enumerate()
    {
        let tok = Tensor::from_slice(toks).view([2, 1]);
        let a = fused.extend(&mut ca, &tok, &(&next_pos + step as i64), &key_mask);
        inp.ids.copy_(&tok);
        let kv_len = cb.attended(4 + step as i64 + 1);
        lens.push(kv_len);
        let b = fused.decode_step(&mut cb, &inp, kv_len);
        inp.advance();
        assert!(
            a.equal(&b),
            "step {step}: {}",
            (a - b).abs().max().double_value(&[])
        );
    }
    assert_eq!(lens, [6, 6, 8, 8, 9]);
}
