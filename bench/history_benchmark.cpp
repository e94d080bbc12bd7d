// The history checker at scale: a seeded randomized run of concurrent workflows
// (Sub-Agent, ReAct and Routing by default) with fills and reuse on and a writer per workload,
// checked as it goes for stale serves and unauthorized serves (bench/history.hpp). Prints the
// counts, wall time and rate; exits 1 if any violation or error was found.
//
//   history_benchmark --ops 1000000
//   history_benchmark --ops 1000000 --replicas 2 --library redis://127.0.0.1:6379
#include "bench/history.hpp"

#include <CLI/CLI.hpp>

#include <cstdio>

int main(int argc, char** argv) {
  dynrt::bench::history::RunOptions o;
  o.ops = 1'000'000;
  CLI::App app{
      "dynrt history checker: zero stale, unauthorized and cross-tenant serves under load"};
  app.add_option("--ops", o.ops, "served results + acknowledged writes to run");
  app.add_option("--seed", o.seed, "seed of the workloads, the drivers and the writers");
  app.add_option("--drivers", o.drivers, "driver threads per workload");
  app.add_option("--workloads", o.workloads, "subagent, react, routing");
  app.add_option("--time-scale", o.time_scale, "sim engine: real ms per simulated second");
  app.add_option("--serves-per-write", o.serves_per_write, "the writers' pace");
  app.add_option("--runs", o.runs, "distinct runs per workload (they recur)");
  app.add_option("--templates", o.templates, "the template folder");
  app.add_option("--tenants", o.tenants, "tenants the runs are spread over (0: one, the default)");
  app.add_option("--replicas", o.replicas,
                 "runtimes per workload sharing one library through --library (runs spread over "
                 "them, writes through each in turn)");
  app.add_option("--library", o.library, "redis://HOST:PORT[/DB] for the shared library tier");
  app.add_flag("--verbose", o.verbose, "report failed runs");
  CLI11_PARSE(app, argc, argv);

  const auto r = dynrt::bench::history::run_history(o);
  std::printf("operations        %llu (served %llu + writes %llu)\n",
              static_cast<unsigned long long>(r.ops()), static_cast<unsigned long long>(r.serves),
              static_cast<unsigned long long>(r.writes));
  std::printf("served            engine %llu, fill %llu, cache %llu (coalesced %llu)\n",
              static_cast<unsigned long long>(r.served_engine),
              static_cast<unsigned long long>(r.served_fill),
              static_cast<unsigned long long>(r.served_cache),
              static_cast<unsigned long long>(r.coalesced));
  std::printf("reads checked     %llu; library invalidations %llu, stale inserts refused %llu\n",
              static_cast<unsigned long long>(r.reads_checked),
              static_cast<unsigned long long>(r.invalidated),
              static_cast<unsigned long long>(r.stale_inserts));
  if (o.replicas > 1)
    std::printf(
        "replicas          %d per workload; served from another's results %llu, local "
        "results refused by the tier's check %llu, writes not shared %llu\n",
        o.replicas, static_cast<unsigned long long>(r.shared_hits),
        static_cast<unsigned long long>(r.shared_checks_failed),
        static_cast<unsigned long long>(r.writes_not_shared));
  std::printf("stale serves      %llu\n", static_cast<unsigned long long>(r.stale));
  std::printf("unauthorized      %llu\n", static_cast<unsigned long long>(r.unauthorized));
  std::printf("cross-tenant      %llu (of %llu library and fill serves, %d tenants)\n",
              static_cast<unsigned long long>(r.cross_tenant),
              static_cast<unsigned long long>(r.tenant_checked), o.tenants);
  std::printf("errors            %llu\n", static_cast<unsigned long long>(r.errors));
  std::printf("wall time         %.1f s\n", r.wall_s);
  std::printf("rate              %.0f operations/s\n",
              r.wall_s > 0 ? static_cast<double>(r.ops()) / r.wall_s : 0.0);
  for (const auto& e : r.examples)
    std::printf("  %s\n", e.c_str());
  return r.stale == 0 && r.unauthorized == 0 && r.cross_tenant == 0 && r.errors == 0 ? 0 : 1;
}
