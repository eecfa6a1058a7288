//! Context windows of well-known models, so compaction works with hosted providers.
//!
//! OpenAI's and Anthropic's APIs do not say how long a model's context is, and local servers
//! (llama.cpp, Ollama) rarely do, so without a table eve would only learn the window from
//! vLLM-style `/models` listings, and long sessions would run into the provider's "context too
//! long" error. The table is consulted after `agent.yaml`'s `context_window` (which always wins)
//! and after the server's own listing.
//!
//! Names are matched by tokens, not by exact string, so the spellings that providers, Ollama tags
//! and GGUF files use all resolve: the last `/` segment is lower-cased and cut into runs of
//! letters and runs of digits (`Meta-Llama-3.1-8B-Instruct` → `meta llama 3 1 8 b instruct`,
//! `gpt-4o-mini` → `gpt 4 o mini`, `qwen2.5:7b` → `qwen 2 5 7 b`). A rule lists token sequences
//! that must all occur; a sequence starting with `^` must start the name. Rules are tried in
//! order, the most specific first. Where a model family has several sizes of window, the table
//! gives the one its weights or API serve by default (for example Qwen3's native 32K, not the
//! 128K it reaches with YaRN): guessing low compacts a little early, guessing high fails a call.
//!
//! Maintained by hand: when a provider ships a model, add its rule above the family's catch-all.
//! Values are the providers' published figures (tokens, input plus output).

/// One row of the table: every sequence in `all` must occur in the name's tokens.
struct Rule {
    all: &'static [&'static str],
    window: u64,
}

const fn rule(all: &'static [&'static str], window: u64) -> Rule {
    Rule { all, window }
}

/// The table, most specific first. Each string is a space-separated token sequence.
const RULES: &[Rule] = &[
    // OpenAI.
    rule(&["gpt 5", "chat"], 128_000),
    rule(&["gpt 5"], 400_000),
    rule(&["gpt oss"], 131_072),
    rule(&["gpt 4 1"], 1_047_576),
    rule(&["gpt 4 o"], 128_000),
    rule(&["^chatgpt"], 128_000),
    rule(&["gpt 4 5"], 128_000),
    rule(&["gpt 4 turbo"], 128_000),
    rule(&["gpt 4 1106"], 128_000),
    rule(&["gpt 4 0125"], 128_000),
    rule(&["gpt 4 vision"], 128_000),
    rule(&["gpt 4 32 k"], 32_768),
    rule(&["gpt 4"], 8_192),
    rule(&["gpt 3 5 turbo instruct"], 4_096),
    rule(&["gpt 3 5"], 16_385),
    rule(&["^o 1 mini"], 128_000),
    rule(&["^o 1 preview"], 128_000),
    rule(&["^o 1"], 200_000),
    rule(&["^o 3"], 200_000),
    rule(&["^o 4"], 200_000),
    // Anthropic: every Claude 3.x and 4.x model has a 200K window (Sonnet's 1M needs a beta
    // header eve does not send).
    rule(&["claude 2 1"], 200_000),
    rule(&["claude 2"], 100_000),
    rule(&["claude instant"], 100_000),
    rule(&["claude"], 200_000),
    // DeepSeek: the hosted API serves 128K; open weights 128K (131,072).
    rule(&["deepseek chat"], 128_000),
    rule(&["deepseek reasoner"], 128_000),
    rule(&["deepseek r 1"], 131_072),
    rule(&["deepseek v 3"], 131_072),
    rule(&["deepseek v 2"], 131_072),
    rule(&["deepseek coder v 2"], 131_072),
    rule(&["deepseek coder"], 16_384),
    // Google Gemini (OpenAI-compatible endpoint) and Gemma.
    rule(&["gemini 1 5 pro"], 2_097_152),
    rule(&["gemini 1 0"], 32_760),
    rule(&["^gemini pro"], 32_760),
    rule(&["gemini"], 1_048_576),
    rule(&["gemma 3 n"], 32_768),
    rule(&["gemma 3", "1 b"], 32_768),
    rule(&["gemma 3"], 131_072),
    rule(&["gemma"], 8_192),
    // Meta Llama.
    rule(&["llama 4 scout"], 10_485_760),
    rule(&["llama 4 maverick"], 1_048_576),
    rule(&["llama 3 1"], 131_072),
    rule(&["llama 3 2"], 131_072),
    rule(&["llama 3 3"], 131_072),
    rule(&["llama 3"], 8_192),
    rule(&["llama 2"], 4_096),
    // Qwen.
    rule(&["qwen 2 5", "1 m"], 1_010_000),
    rule(&["qwen 2 5"], 32_768),
    rule(&["qwen 3 coder"], 262_144),
    rule(&["qwen 3 next"], 262_144),
    rule(&["qwen 3", "2507"], 262_144),
    rule(&["qwen 3"], 32_768),
    rule(&["qwq"], 131_072),
    rule(&["qwen 2"], 32_768),
    // Mistral.
    rule(&["mistral 7 b", "v 0 1"], 8_192),
    rule(&["mistral small", "2501"], 32_768),
    rule(&["mistral small"], 131_072),
    rule(&["mistral medium"], 131_072),
    rule(&["mistral large"], 131_072),
    rule(&["mistral nemo"], 131_072),
    rule(&["mixtral 8 x 22"], 65_536),
    rule(&["mixtral"], 32_768),
    rule(&["codestral 22 b"], 32_768),
    rule(&["codestral"], 262_144),
    rule(&["ministral"], 131_072),
    rule(&["magistral"], 40_960),
    rule(&["devstral"], 131_072),
    rule(&["pixtral"], 131_072),
    rule(&["mistral"], 32_768),
    // Microsoft Phi and Hugging Face SmolLM.
    rule(&["phi 4 mini"], 131_072),
    rule(&["phi 4"], 16_384),
    rule(&["phi 3 5"], 131_072),
    rule(&["phi 3", "128 k"], 131_072),
    rule(&["phi 3"], 4_096),
    rule(&["smollm 3"], 65_536),
    rule(&["smollm 2"], 8_192),
    rule(&["smollm"], 2_048),
];

/// The context window of a well-known model, by name (`gpt-4.1`, `claude-sonnet-4-5`,
/// `meta-llama/Llama-3.1-8B-Instruct`, `qwen2.5:7b`…), or `None` for a model the table does not
/// know.
pub fn known_context_window(model: &str) -> Option<u64> {
    let tokens = tokenize(model);
    if tokens.is_empty() {
        return None;
    }
    RULES
        .iter()
        .find(|rule| rule.all.iter().all(|seq| occurs(&tokens, seq)))
        .map(|rule| rule.window)
}

/// The name's last `/` segment, lower-cased, cut into runs of letters and runs of digits.
fn tokenize(model: &str) -> Vec<String> {
    let name = model
        .rsplit('/')
        .next()
        .unwrap_or(model)
        .to_ascii_lowercase();
    let mut tokens: Vec<String> = Vec::new();
    let mut current = String::new();
    let mut digits = false;
    for c in name.chars() {
        if !c.is_ascii_alphanumeric() {
            if !current.is_empty() {
                tokens.push(std::mem::take(&mut current));
            }
            continue;
        }
        if !current.is_empty() && c.is_ascii_digit() != digits {
            tokens.push(std::mem::take(&mut current));
        }
        digits = c.is_ascii_digit();
        current.push(c);
    }
    if !current.is_empty() {
        tokens.push(current);
    }
    tokens
}

/// Whether the space-separated sequence `seq` occurs contiguously in `tokens` (at the start when
/// it begins with `^`).
fn occurs(tokens: &[String], seq: &str) -> bool {
    let (anchored, seq) = match seq.strip_prefix('^') {
        Some(rest) => (true, rest),
        None => (false, seq),
    };
    let want: Vec<&str> = seq.split(' ').filter(|t| !t.is_empty()).collect();
    if want.is_empty() || want.len() > tokens.len() {
        return false;
    }
    let matches_at = |start: usize| {
        tokens
            .get(start..start + want.len())
            .is_some_and(|window| window.iter().zip(&want).all(|(a, b)| a == b))
    };
    if anchored {
        matches_at(0)
    } else {
        (0..=tokens.len() - want.len()).any(matches_at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_split_letters_from_digits() {
        assert_eq!(
            tokenize("meta-llama/Meta-Llama-3.1-8B-Instruct"),
            ["meta", "llama", "3", "1", "8", "b", "instruct"]
        );
        assert_eq!(tokenize("gpt-4o-mini"), ["gpt", "4", "o", "mini"]);
        assert_eq!(tokenize("qwen2.5:7b"), ["qwen", "2", "5", "7", "b"]);
        assert!(tokenize("").is_empty());
        assert!(tokenize("/").is_empty());
    }
}
