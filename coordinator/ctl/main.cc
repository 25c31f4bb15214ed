// shardctl: the user's tool. Jobs through the coordinator (run, submit,
// status, metrics, list, cancel, watch, logs, checkpoints JOB; see
// job_commands.h) and offline commands on model folders and checkpoints (eval,
// generate, export, plan, prepare-data, chat-template, launch).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <utility>
#include <vector>

#include "coordinator/ctl/commands.h"
#include "coordinator/ctl/enum_option.h"
#include "coordinator/ctl/job_commands.h"
#include "coordinator/ctl/plan_command.h"
#include "coordinator/ctl/chat_template_command.h"
#include "coordinator/ctl/prepare_data_command.h"
#include "coordinator/ctl/render_command.h"
#include "shard/common/cli_conventions.h"
#include "shard/common/logging.h"

namespace {

CLI::App* AddEval(CLI::App& app, shardctl::EvalOptions* o) {
  CLI::App* sub = app.add_subcommand(
      "eval", "Mean next-token loss over a token file, or loss and exact-match accuracy of greedy answers on SFT data");
  sub->add_option("--model", o->model, "HF model folder, or a committed checkpoint step folder")
      ->required()
      ->check(CLI::ExistingDirectory);
  sub->add_option("--adapter", o->adapter, "A PEFT LoRA adapter folder applied on top of --model")
      ->check(CLI::ExistingDirectory);
  sub->add_option("--tokens", o->tokens, "Raw little-endian uint32 token file")->check(CLI::ExistingFile);
  sub->add_option("--data", o->data, "SFT data: a prepared PREFIX (prepare-data --out) or a JSONL file");
  sub->add_option("--seq-len", o->seq_len,
                  "--tokens: window length (required); --data: row length (default: the longest sample)");
  sub->add_option("--batch", o->batch, "Windows or samples per forward pass")->capture_default_str();
  sub->add_option("--max-windows", o->max_windows, "--tokens: at most this many windows (0 = all)")->capture_default_str();
  sub->add_option("--max-samples", o->max_samples, "--data: the first N samples (0 = all)")->capture_default_str();
  sub->add_option("--tokenizer", o->tokenizer,
                  "--data F.jsonl: tokenizer to prepare it with (default: the --model folder's tokenizer files, else "
                  "byte)");
  sub->add_option("--template", o->chat_template, "--data F.jsonl: chat template")->capture_default_str();
  shardctl::AddEnumOption(sub, "--train-on", &o->train_on, shard::kTrainOnNames, "--data F.jsonl: which tokens are targets");
  sub->add_option("--show", o->show, "--data: print the first N greedy answers")->capture_default_str();
  sub->add_option("--device", o->device, "auto, cpu or cuda")->capture_default_str();
  sub->add_flag("--json", o->json,
               "Print {\"loss\", \"tokens\"} (--data adds samples, scored, exact, exact_match, seq_len)");
  return sub;
}

CLI::App* AddGenerate(CLI::App& app, shardctl::GenerateOptions* o, std::string* prompt) {
  CLI::App* sub = app.add_subcommand("generate", "Generate text from a prompt or a chat (KV cache, sampling, eos stop)");
  sub->add_option("--model", o->model, "HF model folder or committed checkpoint step folder")->required()->check(CLI::ExistingDirectory);
  sub->add_option("--adapter", o->adapter, "A PEFT LoRA adapter folder applied on top of --model")
      ->check(CLI::ExistingDirectory);
  // Given but empty is named as such (not "give exactly one of ...").
  auto non_empty = [](const std::string& flag, const std::string& hint) {
    return CLI::Validator([=](std::string& v) { return v.empty() ? flag + " is empty: " + hint : std::string(); },
                          "", "not empty");
  };
  sub->add_option("--prompt", o->prompt_text, "Prompt text (the tokenizer's bos first)")
      ->check(non_empty("--prompt", "give the text to continue (or --prompt-tokens with the ids to start from)"));
  sub->add_option("--messages", o->messages, "JSON chat [{role, content}...] rendered by the model's chat template")
      ->check(non_empty("--messages", "give a JSON chat file"));
  sub->add_option("--prompt-tokens", *prompt, "Comma-separated token ids, e.g. 1,2,3")
      ->check(non_empty("--prompt-tokens", "give at least one token id"));
  sub->add_option("--tokenizer", o->tokenizer, "Tokenizer folder/file or byte (default: the model folder's)");
  sub->add_option("--max-new", o->max_new, "Most tokens to generate (stops earlier at an eos token)")->capture_default_str();
  sub->add_option("--temperature", o->temperature, "0 = greedy")->capture_default_str();
  sub->add_option("--top-p", o->top_p, "Nucleus sampling mass")->capture_default_str();
  sub->add_option("--top-k", o->top_k, "Sample among the k most likely (0 = all)")->capture_default_str();
  sub->add_option("--seed", o->seed, "Sampling seed")->capture_default_str();
  sub->add_option("--device", o->device, "auto, cpu or cuda")->capture_default_str();
  sub->add_flag("--json", o->json, "Print {prompt_ids, generated_ids, text, stop, eos_ids, seconds}");
  return sub;
}

CLI::App* AddExport(CLI::App& app, shardctl::ExportOptions* o) {
  CLI::App* sub = app.add_subcommand("export", "Write a committed checkpoint step as an HF folder (config.json + safetensors)");
  sub->add_option("step_dir", o->step_dir, "Committed step directory, e.g. runs/job/step_00000100")->required();
  sub->add_option("--out", o->out, "Output folder")->required();
  sub->add_option("--dtype", o->dtype, "fp32, bf16 or fp16")->capture_default_str();
  sub->add_option("--max-file-bytes", o->max_file_bytes, "Split into several safetensors files above this size")
      ->capture_default_str();
  sub->add_option("--tokenizer", o->tokenizer,
                  "Tokenizer folder whose tokenizer files are copied in (and generation_config.json written)");
  sub->add_option("--template", o->chat_template,
                  "The chat template the model was fine-tuned with (as data.template): generation_config.json's "
                  "eos_token_id also lists the token it ends a reply with")
      ->capture_default_str();
  return sub;
}

CLI::App* AddCheckpoints(CLI::App& app, shardctl::CheckpointsOptions* o) {
  CLI::App* sub = app.add_subcommand("checkpoints", "List a job's checkpoint steps with sizes and validity");
  sub->add_option("dir", o->dir, "A job id (asks the coordinator), or a checkpoint directory (<checkpoint.dir>/<job name>)")
      ->required();
  sub->add_flag("--json", o->json, "Print JSON: for a directory an array of steps, for a job id {\"checkpoints\": [...]}");
  return sub;
}

CLI::App* AddLaunch(CLI::App& app, shardctl::LaunchOptions* o) {
  CLI::App* sub = app.add_subcommand("launch",
                                "Run a job here: one shardd-worker per rank (parallel.world_size), supervised");
  sub->add_option("job_file", o->job_file, "Job file (YAML)")->required()->check(CLI::ExistingFile);
  sub->add_option("--set", o->sets, "Override a job-file key: --set train.steps=100 (repeatable)");
  sub->add_option("--worker-bin", o->worker_bin, "Path of shardd-worker");
  sub->add_option("--metrics-prefix", o->metrics_prefix, "Rank r appends per-step JSON metrics to PREFIX<r>.jsonl");
  return sub;
}

CLI::App* AddPlan(CLI::App& app, shardctl::PlanOptions* o) {
  CLI::App* sub = app.add_subcommand("plan", "Memory and time per GPU and host, a verdict, and what to change");
  sub->add_option("job_file", o->job_file, "Job file (YAML)")->required()->check(CLI::ExistingFile);
  sub->add_option("--set", o->sets, "Override a job-file key: --set train.micro_batch=2 (repeatable)");
  sub->add_option("--cluster", o->cluster,
                  "A cluster of configs/hardware/clusters.yaml, e.g. 8xA100-80GB-SXM (default: this host's CPU for "
                 "device cpu/auto)");
  sub->add_flag("--json", o->json, "Print the plan as JSON");
  sub->add_flag("--simulate", o->simulate,
                "Also run one rank's trainer at the job's true shapes on a backend that only counts bytes, and "
                "print its peak device and host memory beside the estimate");
  return sub;
}

CLI::App* AddPrepareData(CLI::App& app, shardctl::PrepareDataOptions* o) {
  CLI::App* sub = app.add_subcommand("prepare-data", "Tokenize SFT JSONL into PREFIX.{tokens,mask,index,json}");
  sub->add_option("--input", o->input,
                  "JSONL rows: {\"messages\":[...]}, {\"prompt\",\"response\"}, alpaca or sharegpt")
      ->required()
      ->check(CLI::ExistingFile);
  sub->add_option("--tokenizer", o->tokenizer, "byte, a tokenizer.json, a SentencePiece .model, or a folder")->required();
  sub->add_option("--template", o->chat_template,
                  "auto (the tokenizer folder's chat_template, else plain), hf, hf:NAME, plain, llama2, llama3 or chatml")
      ->capture_default_str();
  sub->add_option("--seq-len", o->seq_len, "Training sequence length")->required();
  sub->add_option("--out", o->out, "Output prefix")->required();
  shardctl::AddEnumOption(sub, "--train-on", &o->train_on, shard::kTrainOnNames, "Which tokens are targets");
  shardctl::AddEnumOption(sub, "--format", &o->format, shard::kSftFormatNames, "Row format (auto: per file, from its first row)");
  shardctl::AddEnumOption(sub, "--bad-rows", &o->bad_rows, shard::kBadRowsNames, "A malformed row fails the run, or is skipped");
  sub->add_option("--threads", o->threads, "Tokenizer threads (0 = all cores)")->capture_default_str();
  sub->add_flag("--json", o->json, "Print the dataset header as JSON");
  return sub;
}

CLI::App* AddChatTemplate(CLI::App& app, shardctl::ChatTemplateOptions* o) {
  CLI::App* sub = app.add_subcommand("chat-template",
                                     "Print a conversation rendered by a model's chat template (as transformers' "
                                     "apply_chat_template(..., tokenize=False) prints it)");
  sub->add_option("--tokenizer", o->tokenizer, "The tokenizer folder (tokenizer_config.json with chat_template)")
      ->required();
  sub->add_option("--messages", o->messages,
                  "JSON: [{\"role\", \"content\"}, ...] or {\"messages\": [...], other template variables}")
      ->required()
      ->check(CLI::ExistingFile);
  sub->add_flag("--add-generation-prompt", o->add_generation_prompt, "End with the assistant's turn header");
  sub->add_option("--template", o->chat_template, "auto, hf, hf:NAME, plain, llama2, llama3 or chatml")
      ->capture_default_str();
  return sub;
}

// render's own address and state dir are the pods' view, not shardctl's: the
// old spellings, which read like the global --coordinator/--state-dir, are
// refused naming the new ones.
struct RenamedFlags {
  std::string coordinator, state_dir;
  shard::Status Check() const {
    if (!coordinator.empty())
      return shard::InvalidArgument("render: --coordinator is now --pod-coordinator (the address the pods dial; "
                                    "the global --coordinator is the one shardctl dials)");
    if (!state_dir.empty())
      return shard::InvalidArgument("render: --state-dir is now --pod-state-dir (the coordinator's state dir as the "
                                    "pods see it; the global --state-dir is shardctl's)");
    return shard::OkStatus();
  }
};

CLI::App* AddRender(CLI::App& app, shardctl::RenderOptions* o, RenamedFlags* renamed) {
  CLI::App* sub = app.add_subcommand("render", "Print the cluster objects a launcher would create for a job (k8s), without applying them");
  sub->add_option("target", o->target, "k8s")->required()->check(CLI::IsMember({"k8s"}));
  sub->add_option("job_file", o->job_file, "Job file (YAML)")->required()->check(CLI::ExistingFile);
  sub->add_option("--set", o->sets, "Override a job-file key: --set resources.kubernetes.nodes=2 (repeatable)");
  sub->add_option("--job-id", o->job_id, "Job id to name the objects after (default: <name>-1)");
  sub->add_option("--attempt", o->attempt, "Attempt number")->capture_default_str();
  sub->add_option("--pod-coordinator", o->coordinator,
                  "Address the pods dial (default: resources.kubernetes.coordinator, else shardd:7070)");
  sub->add_option("--coordinator", renamed->coordinator, "")->group("");  // renamed: refused with the new name
  sub->add_option("--workdir", o->workdir, "The job's directory on the claim (default: this one if under mount_path, else mount_path)");
  sub->add_option("--pod-state-dir", o->state_dir,
                  "The coordinator's --state-dir as the pods see it, for the rank log dir (default: <mount_path>/state)");
  sub->add_option("--state-dir", renamed->state_dir, "")->group("");  // renamed: refused with the new name
  sub->add_option("--worker-command", o->worker_command, "shardd-worker in the image")->capture_default_str();
  return sub;
}

// shardctl's exit codes: 2 for bad input (a wrong value, a missing file, a
// corrupt checkpoint, something out of range or not supported, a request the
// coordinator refuses in its state: `logs --rank 99`, an unsupported
// model_type, "can never run on this host", a path outside --allowed-root),
// 1 for everything else (no coordinator, an RPC that failed, a job that did
// not succeed, a plan that does not fit).
int ExitCode(const shard::Status& st) {
  using C = shard::StatusCode;
  switch (st.code()) {
    case C::kInvalidArgument:
    case C::kNotFound:
    case C::kDataLoss:
    case C::kOutOfRange:
    case C::kUnimplemented:
    case C::kFailedPrecondition:
    case C::kPermissionDenied:  // a path outside the coordinator's --allowed-root
      return shard::cli::kExitUsage;
    default:
      return shard::cli::kExitFailure;
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"shardctl: train, evaluate and sample Llama models with shardd"};
  app.require_subcommand(1);
  shard::cli::LogFlags log;
  log.level = "warn";
  shard::cli::AddCommonFlags(app, "shardctl", &log);

  shardctl::EvalOptions eval;
  shardctl::GenerateOptions gen;
  std::string prompt;
  shardctl::ExportOptions exp;
  shardctl::CheckpointsOptions ck;
  shardctl::LaunchOptions la;
  shardctl::PlanOptions pl;
  shardctl::PrepareDataOptions prep;
  shardctl::RenderOptions rd;
  RenamedFlags rd_renamed;
  shardctl::ChatTemplateOptions ct;
  // Offline commands: the first one given runs.
  // A command that already printed its JSON document (plan --json of a job
  // that does not fit) reports the error on stderr only: stdout stays one
  // parseable document.
  bool json_printed = false;
  const std::vector<std::pair<CLI::App*, std::function<shard::Status()>>> offline = {
      {AddEval(app, &eval), [&] { return shardctl::RunEval(eval); }},
      {AddGenerate(app, &gen, &prompt),
       [&] {
         if (!prompt.empty()) {
           auto tokens = shardctl::ParseTokenList(prompt);
           if (!tokens.ok()) return tokens.status();
           gen.prompt = *tokens;
         }
         return shardctl::RunGenerate(gen);
       }},
      {AddExport(app, &exp), [&] { return shardctl::RunExport(exp); }},
      {AddCheckpoints(app, &ck), [&] { return shardctl::RunCheckpoints(ck); }},
      {AddLaunch(app, &la), [&] { return shardctl::RunLaunch(la); }},
      {AddPlan(app, &pl),
       [&] {
         bool printed = false;
         shard::Status st = shardctl::RunPlan(pl, &printed);
         json_printed = printed && pl.json;
         return st;
       }},
      {AddPrepareData(app, &prep), [&] { return shardctl::RunPrepareData(prep); }},
      {AddChatTemplate(app, &ct), [&] { return shardctl::RunChatTemplate(ct); }},
      {AddRender(app, &rd, &rd_renamed),
       [&] {
         RETURN_IF_ERROR(rd_renamed.Check());
         return shardctl::RunRender(rd);
       }},
  };
  shardctl::JobCommands jobs(app);

  shard::cli::BindEnv(app);  // SHARDD_COORDINATOR, SHARDD_TOKEN, SHARDD_STATE_DIR, SHARDD_TLS_*, SHARDD_LOG_*
  if (auto code = shard::cli::Parse(app, argc, argv, "shardctl")) return *code;
  shard::InitLogging(log.level, log.format);

  shard::Status st;
  if (jobs.Selected()) {
    st = jobs.Run();
  } else if (app.got_subcommand("checkpoints") && ck.dir.find('/') == std::string::npos &&
             !std::filesystem::exists(ck.dir)) {
    // A job id (ids never contain '/'); a path is read offline.
    st = jobs.Checkpoints(ck.dir, ck.json);
  } else {
    for (const auto& [sub, run] : offline)
      if (sub->parsed()) st = run();
  }
  if (!st.ok()) {
    shard::cli::PrintError("shardctl", st, ExitCode(st), shard::cli::WantsJson(argc, argv) && !json_printed);
    return ExitCode(st);
  }
  return 0;
}
