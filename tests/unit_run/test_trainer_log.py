from verl_p40.run.trainer_log import parse_line, read_steps


def test_parses_verl_console_lines_with_ray_prefix_and_numpy_scalars(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(
        "\x1b[36m(TaskRunner pid=3151)\x1b[0m step:1 - critic/score/mean:0.25 - timing_s/gen:7.5 - "
        "perf/max_memory_allocated_gb:np.float64(14.79) - actor/lr:np.float64(1e-06) - note:text\n"
        "Training Progress:  10%|#  | 1/10\n"
        "(TaskRunner pid=3151) step:2 - critic/score/mean:0.5\n"
        "(TaskRunner pid=3151) step:1 - critic/score/mean:0.75\n"  # resumed run logs step 1 again: last wins
    )
    steps = read_steps(log)
    assert [s["step"] for s in steps] == [1, 2]
    assert steps[0]["critic/score/mean"] == 0.75
    first = parse_line(log.read_text().splitlines()[0])
    assert first["perf/max_memory_allocated_gb"] == 14.79 and first["actor/lr"] == 1e-06 and "note" not in first
    assert parse_line("no metrics here") is None


def test_nan_and_inf_are_kept_not_dropped():
    """A NaN gradient norm (bf16 gone wrong) must show in every result made from the log: literal_eval cannot read
    `nan`, and the key used to vanish."""
    import math

    from verl_p40.run.trainer_log import parse_line

    record = parse_line(
        "(TaskRunner pid=1) step:3 - actor/grad_norm:np.float64(nan) - critic/grad_norm:nan - x/max:inf - "
        "x/min:np.float64(-inf) - actor/lr:np.float64(1e-06)"
    )
    assert math.isnan(record["actor/grad_norm"]) and math.isnan(record["critic/grad_norm"])
    assert record["x/max"] == math.inf and record["x/min"] == -math.inf and record["actor/lr"] == 1e-06


def test_a_falling_validation_accuracy_is_said_once_in_one_line():
    from verl_p40.run.trainer_log import VALIDATION_KEY, ValidationWatch

    def line(step, value):
        return f"(TaskRunner pid=1) step:{step} - {VALIDATION_KEY}:{value} - critic/score/mean:0.2"

    watch = ValidationWatch(256)  # 256 questions at 26 %: one standard error is 2.7 points
    assert watch.feed("(TaskRunner pid=1) step:1 - critic/score/mean:0.2") is None  # no validation in it
    assert watch.feed(line(0, 0.266)) is None  # where the run starts
    assert watch.feed(line(10, 0.23)) is None  # within 2 standard errors: noise
    said = watch.feed(line(20, 0.20))
    assert said == (
        "validation accuracy fell: 26.6% at step 0 -> 20.0% at step 20 (256 questions, more than 2 standard errors); "
        "the run is unlearning: stop it (the last checkpoint before the fall is kept) and change the recipe"
    )
    assert watch.feed(line(30, 0.15)) is None  # said once
    rising = ValidationWatch(256)
    assert [rising.feed(line(s, v)) for s, v in ((0, 0.266), (5, 0.305), (10, 0.324))] == [None, None, None]
