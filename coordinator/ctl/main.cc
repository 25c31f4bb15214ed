// shardctl: the user's tool. Jobs through the coordinator (run, submit,
// status, metrics, list, cancel, watch, logs, checkpoints JOB; see
// job_commands.h) and offline commands on model folders and checkpoints (eval,
// generate, export, plan, prepare-data, chat-template, launch).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>

#include "coordinator/ctl/commands.h"
#include "coordinator/ctl/job_commands.h"
#include "coordinator/ctl/plan_command.h"
#include "coordinator/ctl/chat_template_command.h"
#include "coordinator/ctl/prepare_data_command.h"
#include "coordinator/ctl/render_command.h"
#include "shard/common/logging.h"

int main(int argc, char** argv) {
  CLI::App app{"shardctl: train, evaluate and sample Llama models with shardd"};
  app.require_subcommand(1);
  std::string log_level = "warn";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error");

  shardctl::EvalOptions eval;
  auto* ev = app.add_subcommand(
      "eval", "Mean next-token loss over a token file, or loss and exact-match accuracy of greedy answers on SFT data");
  ev->add_option("--model", eval.model, "HF model folder, or a committed checkpoint step folder")
      ->required()
      ->check(CLI::ExistingDirectory);
  ev->add_option("--tokens", eval.tokens, "Raw little-endian uint32 token file")->check(CLI::ExistingFile);
  ev->add_option("--data", eval.data, "SFT data: a prepared PREFIX (prepare-data --out) or a JSONL file");
  ev->add_option("--seq-len", eval.seq_len,
                 "--tokens: window length (required); --data: row length (default: the longest sample)");
  ev->add_option("--batch", eval.batch, "Windows or samples per forward pass")->capture_default_str();
  ev->add_option("--max-windows", eval.max_windows, "--tokens: at most this many windows (0 = all)")->capture_default_str();
  ev->add_option("--max-samples", eval.max_samples, "--data: the first N samples (0 = all)")->capture_default_str();
  ev->add_option("--tokenizer", eval.tokenizer, "--data F.jsonl: tokenizer to prepare it with")->capture_default_str();
  ev->add_option("--template", eval.chat_template, "--data F.jsonl: chat template")->capture_default_str();
  ev->add_option("--train-on", eval.train_on, "--data F.jsonl: assistant or all")->capture_default_str();
  ev->add_option("--show", eval.show, "--data: print the first N greedy answers")->capture_default_str();
  ev->add_option("--device", eval.device, "auto, cpu or cuda")->capture_default_str();
  ev->add_flag("--json", eval.json,
               "Print {\"loss\", \"tokens\"} (--data adds samples, scored, exact, exact_match, seq_len)");

  shardctl::GenerateOptions gen;
  std::string prompt;
  auto* ge = app.add_subcommand("generate", "Greedy decoding from a prompt of token ids");
  ge->add_option("--model", gen.model, "HF model folder (config.json + safetensors)")->required()->check(CLI::ExistingDirectory);
  ge->add_option("--prompt-tokens", prompt, "Comma-separated token ids, e.g. 1,2,3")->required();
  ge->add_option("--max-new", gen.max_new, "Tokens to generate")->capture_default_str();
  ge->add_option("--device", gen.device, "auto, cpu or cuda")->capture_default_str();
  ge->add_flag("--json", gen.json, "Print {\"prompt\": [...], \"generated\": [...]}");

  shardctl::ExportOptions exp;
  auto* ex = app.add_subcommand("export", "Write a committed checkpoint step as an HF folder (config.json + safetensors)");
  ex->add_option("step_dir", exp.step_dir, "Committed step directory, e.g. runs/job/step_00000100")->required();
  ex->add_option("--out", exp.out, "Output folder")->required();
  ex->add_option("--dtype", exp.dtype, "fp32, bf16 or fp16")->capture_default_str();
  ex->add_option("--max-file-bytes", exp.max_file_bytes, "Split into several safetensors files above this size")
      ->capture_default_str();
  ex->add_option("--tokenizer", exp.tokenizer,
                 "Tokenizer folder whose tokenizer files are copied in (and generation_config.json written)");

  shardctl::CheckpointsOptions ck;
  auto* cp = app.add_subcommand("checkpoints", "List a job's checkpoint steps with sizes and validity");
  cp->add_option("dir", ck.dir, "A job id (asks the coordinator), or a checkpoint directory (<checkpoint.dir>/<job name>)")
      ->required();
  cp->add_flag("--json", ck.json, "Print JSON: for a directory an array of steps, for a job id {\"checkpoints\": [...]}");

  shardctl::LaunchOptions la;
  auto* lc = app.add_subcommand("launch",
                                "Run a job here: one shardd-worker per rank (parallel.world_size), supervised");
  lc->add_option("job_file", la.job_file, "Job file (YAML)")->required()->check(CLI::ExistingFile);
  lc->add_option("--set", la.sets, "Override a job-file key: --set train.steps=100 (repeatable)");
  lc->add_option("--worker-bin", la.worker_bin, "Path of shardd-worker");
  lc->add_option("--metrics-prefix", la.metrics_prefix, "Rank r appends per-step JSON metrics to PREFIX<r>.jsonl");

  shardctl::PlanOptions pl;
  auto* pc = app.add_subcommand("plan", "Memory and time per GPU and host, a verdict, and what to change");
  pc->add_option("job_file", pl.job_file, "Job file (YAML)")->required()->check(CLI::ExistingFile);
  pc->add_option("--set", pl.sets, "Override a job-file key: --set train.micro_batch=2 (repeatable)");
  pc->add_option("--cluster", pl.cluster,
                 "A cluster of configs/hardware/clusters.yaml, e.g. 8xA100-80GB-SXM (default: this host's CPU for "
                 "device cpu/auto)");
  pc->add_flag("--json", pl.json, "Print the plan as JSON");

  shardctl::PrepareDataOptions prep;
  auto* pd = app.add_subcommand("prepare-data", "Tokenize SFT JSONL into PREFIX.{tokens,mask,index,json}");
  pd->add_option("--input", prep.input,
                 "JSONL rows: {\"messages\":[...]}, {\"prompt\",\"response\"}, alpaca or sharegpt")
      ->required()
      ->check(CLI::ExistingFile);
  pd->add_option("--tokenizer", prep.tokenizer, "byte, a tokenizer.json, a SentencePiece .model, or a folder")->required();
  pd->add_option("--template", prep.chat_template,
                 "auto (the tokenizer folder's chat_template, else plain), hf, hf:NAME, plain, llama2, llama3 or chatml")
      ->capture_default_str();
  pd->add_option("--seq-len", prep.seq_len, "Training sequence length")->required();
  pd->add_option("--out", prep.out, "Output prefix")->required();
  pd->add_option("--train-on", prep.train_on, "assistant or all")->capture_default_str();
  pd->add_option("--format", prep.format, "Row format: auto (per file, from its first row), messages, prompt_response, "
                                          "alpaca or sharegpt")
      ->capture_default_str();
  pd->add_option("--bad-rows", prep.bad_rows, "fail or skip")->capture_default_str();
  pd->add_option("--threads", prep.threads, "Tokenizer threads (0 = all cores)")->capture_default_str();
  pd->add_flag("--json", prep.json, "Print the dataset header as JSON");

  shardctl::ChatTemplateOptions ct;
  auto* ctc = app.add_subcommand("chat-template",
                                 "Print a conversation rendered by a model's chat template (as transformers' "
                                 "apply_chat_template(..., tokenize=False) prints it)");
  ctc->add_option("--tokenizer", ct.tokenizer, "The tokenizer folder (tokenizer_config.json with chat_template)")
      ->required();
  ctc->add_option("--messages", ct.messages,
                  "JSON: [{\"role\", \"content\"}, ...] or {\"messages\": [...], other template variables}")
      ->required()
      ->check(CLI::ExistingFile);
  ctc->add_flag("--add-generation-prompt", ct.add_generation_prompt, "End with the assistant's turn header");
  ctc->add_option("--template", ct.chat_template, "auto, hf, hf:NAME, plain, llama2, llama3 or chatml")
      ->capture_default_str();

  shardctl::RenderOptions rd;
  auto* rc = app.add_subcommand("render", "Print the cluster objects a launcher would create for a job (k8s), without applying them");
  rc->add_option("target", rd.target, "k8s")->required()->check(CLI::IsMember({"k8s"}));
  rc->add_option("job_file", rd.job_file, "Job file (YAML)")->required()->check(CLI::ExistingFile);
  rc->add_option("--set", rd.sets, "Override a job-file key: --set resources.kubernetes.nodes=2 (repeatable)");
  rc->add_option("--job-id", rd.job_id, "Job id to name the objects after (default: <name>-1)");
  rc->add_option("--attempt", rd.attempt, "Attempt number")->capture_default_str();
  rc->add_option("--coordinator", rd.coordinator, "Address the pods dial (default: resources.kubernetes.coordinator, else shardd:7070)");
  rc->add_option("--workdir", rd.workdir, "The job's directory on the claim (default: this one if under mount_path, else mount_path)");
  rc->add_option("--state-dir", rd.state_dir, "The coordinator's --state-dir, for the rank log dir (default: <mount_path>/state)");
  rc->add_option("--worker-command", rd.worker_command, "shardd-worker in the image")->capture_default_str();

  shardctl::JobCommands jobs(app);

  CLI11_PARSE(app, argc, argv);
  shard::InitLogging(log_level);

  shard::Status st;
  if (jobs.Selected()) {
    st = jobs.Run();
  } else if (*cp && ck.dir.find('/') == std::string::npos && !std::filesystem::exists(ck.dir)) {
    // A job id (ids never contain '/'); a path is read offline.
    st = jobs.Checkpoints(ck.dir, ck.json);
  } else if (*ev) {
    st = shardctl::RunEval(eval);
  } else if (*pd) {
    st = shardctl::RunPrepareData(prep);
  } else if (*ctc) {
    st = shardctl::RunChatTemplate(ct);
  } else if (*pc) {
    st = shardctl::RunPlan(pl);
  } else if (*rc) {
    st = shardctl::RunRender(rd);
  } else if (*lc) {
    st = shardctl::RunLaunch(la);
  } else if (*ex) {
    st = shardctl::RunExport(exp);
  } else if (*cp) {
    st = shardctl::RunCheckpoints(ck);
  } else if (*ge) {
    auto tokens = shardctl::ParseTokenList(prompt);
    st = tokens.ok() ? (gen.prompt = *tokens, shardctl::RunGenerate(gen)) : tokens.status();
  }
  if (!st.ok()) {
    std::fprintf(stderr, "shardctl: %s\n", st.ToString().c_str());
    return st.code() == shard::StatusCode::kInvalidArgument || st.code() == shard::StatusCode::kNotFound ||
                   st.code() == shard::StatusCode::kDataLoss
               ? 2
               : 1;
  }
  return 0;
}
