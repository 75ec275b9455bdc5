/* cli.h: the fogline subcommands. Each returns the process exit status: 0 ok, 1 runtime
 * error (message already printed as one line on stderr), 2 usage error. */
#ifndef FL_CLI_H
#define FL_CLI_H

int fl_cmd_serve(int argc, char **argv);    /* server/serve.c */
int fl_cmd_info(int argc, char **argv);
int fl_cmd_quantize(int argc, char **argv);
int fl_cmd_generate(int argc, char **argv);
int fl_cmd_tokenize(int argc, char **argv);
int fl_cmd_bench(int argc, char **argv);
int fl_cmd_schema(int argc, char **argv);
int fl_bench_tokenizer(int argc, char **argv); /* server/bench/bench_tokenizer.c */
int fl_bench_forward(int argc, char **argv);   /* server/bench/bench_forward.c */
int fl_bench_decode(int argc, char **argv);
int fl_bench_parallel(int argc, char **argv);  /* server/bench/bench_parallel.c */
int fl_bench_ws_load(int argc, char **argv);   /* server/bench/bench_load.c */

#endif
