/*
 * config.h - the user's config file: the defaults set once (docs/config.md).
 *
 * A file of `key = value` lines ('#' starts a comment) at --config FILE,
 * else $XDG_CONFIG_HOME/deltafin/config, else ~/.config/deltafin/config (a
 * missing default file is no error). Each key stands for one command-line
 * flag and applies to the commands that take that flag; DELTAFIN_<KEY>
 * (upper case, '-' as '_') in the environment overrides the file, and a flag
 * overrides both. Unknown keys, repeated keys and bad values are errors that
 * name the file and line.
 *
 * Applying it is rewriting argv: the settings that apply to the command are
 * put before the user's own arguments, as flags, so every command's parser
 * (last one wins) sees them and checks them as it always does.
 */
#ifndef DF_JOBS_CONFIG_H
#define DF_JOBS_CONFIG_H

/* Take --config FILE out of argv, read the config (and DELTAFIN_* variables)
 * and put the settings that apply to argv[1] before the user's arguments.
 * On an error: says why on stderr and returns 2 (usage) or 1; else 0. The new
 * argv lives until the process ends. */
int cfg_apply(int *argc, char ***argv);

/* `deltafin config [--config FILE] [flags]`: print every setting, its
 * effective value and where it came from (default, FILE:LINE, env VAR, flag). */
int cfg_main(int argc, char **argv);

#endif
