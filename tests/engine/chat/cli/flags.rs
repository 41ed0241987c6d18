//! `k3 chat`'s flags end to end through a pipe: the system prompt of `--system` and
//! `--system-file` reaches the template (the first turn's ids are `k3 template`'s for the
//! same messages), and the sampling defaults come from the checkpoint's
//! `generation_config.json` (ENGINE.md §8).

use super::{chat, chat_in, k3_template, s};
use crate::support::{copy_dir, fixture, scratch_dir};

const ARGS: &[&str] = &["--max-reply", "2", "--seed", "1", "--ctx", "300"];

#[test]
fn the_system_prompt_of_system_reaches_the_template() {
    let mut args = ARGS.to_vec();
    args.extend(["--system", "Be brief."]);
    let c = chat("chat-flag-system", &args, "Hi\n", None);
    assert_eq!(c.code(), 0, "{}", c.stderr());
    let want = k3_template(
        &c.dir,
        r#"[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]"#,
    );
    assert_eq!(c.inputs()[0], want);
    // and the history writes it
    assert_eq!(s(&c.history[1], "role"), "system");
    assert_eq!(s(&c.history[1], "content"), "Be brief.");
}

/// A file written by an editor ends in a line ending, which is not part of the prompt: the
/// last one is dropped (one only: the text's own blank line stays).
#[test]
fn the_system_prompt_of_system_file_drops_its_last_line_ending() {
    let dir = scratch_dir("chat-flag-system-file-src");
    for (name, file, prompt) in [
        ("lf", "Be brief.\n", "Be brief."),
        ("crlf", "Be brief.\r\n", "Be brief."),
        ("none", "Be brief.", "Be brief."),
        ("two", "Be brief.\nReally.\n\n", "Be brief.\nReally.\n"),
    ] {
        let f = dir.join(format!("{name}.txt"));
        std::fs::write(&f, file).unwrap();
        let mut args = ARGS.to_vec();
        args.extend(["--system-file", f.to_str().unwrap()]);
        let c = chat(
            &format!("chat-flag-system-file-{name}"),
            &args,
            "Hi\n",
            None,
        );
        assert_eq!(c.code(), 0, "{name}: {}", c.stderr());
        let messages = format!(
            r#"[{{"role": "system", "content": {}}}, {{"role": "user", "content": "Hi"}}]"#,
            k3::json::Value::from(prompt).to_json()
        );
        assert_eq!(c.inputs()[0], k3_template(&c.dir, &messages), "{name}");
        assert_eq!(s(&c.history[1], "content"), prompt, "{name}");
    }
}

/// The sampling defaults are the checkpoint's `generation_config.json` (each key present),
/// else 1.0, 0.95, off; a flag overrides its key.
#[test]
fn sampling_defaults_come_from_generation_config_json() {
    let model = copy_dir(&fixture("tiny-k3-text"), "chat-generation-config-model");
    std::fs::write(
        model.join("generation_config.json"),
        r#"{"temperature": 0.6, "top_p": 0.8, "top_k": 20, "max_new_tokens": 64}"#,
    )
    .unwrap();
    let m = model.to_str().unwrap();
    let c = chat_in(
        m,
        "chat-generation-config",
        ARGS,
        "Hi\n/save s.state\n",
        None,
    );
    assert_eq!(c.code(), 0, "{}", c.stderr());
    assert!(
        c.stderr()
            .contains("temperature 0.6, top-p 0.8, top-k 20, min-p 0"),
        "{}",
        c.stderr()
    );
    let t = k3::json::parse(&std::fs::read(c.dir.join("s.state.json")).unwrap()).unwrap();
    let sampler = t.get("sampler").unwrap();
    let num = |k: &str| sampler.get(k).unwrap().as_number().unwrap().as_f64();
    assert_eq!(
        (num("temperature"), num("top_p"), num("top_k")),
        (0.6, 0.8, 20.0)
    );
    // a flag wins over the file; the keys it leaves out keep the file's values
    let mut args = ARGS.to_vec();
    args.extend(["--temperature", "0.3"]);
    let c = chat_in(m, "chat-generation-config-flag", &args, "", None);
    assert_eq!(c.code(), 0, "{}", c.stderr());
    assert!(
        c.stderr()
            .contains("temperature 0.3, top-p 0.8, top-k 20, min-p 0"),
        "{}",
        c.stderr()
    );
    // without the file: the defaults
    let c = chat("chat-generation-config-none", ARGS, "", None);
    assert!(
        c.stderr()
            .contains("temperature 1, top-p 0.95, top-k 0, min-p 0"),
        "{}",
        c.stderr()
    );
}
