package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/urfave/cli/v3"
	"golang.org/x/term"

	"github.com/strata-llm/strata/daemon/client"
	"github.com/strata-llm/strata/daemon/openai"
)

func init() {
	registerCommand(chatCommand)
	registerCommand(completeCommand)
}

func genFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "model", Aliases: []string{"m"}, Usage: "model id (default: the first loaded model)"},
		&cli.IntFlag{Name: "max-tokens", Aliases: []string{"n"}, Usage: "tokens to generate (default: the daemon's)"},
		&cli.FloatFlag{Name: "temperature", Aliases: []string{"t"}, Value: -1, Usage: "sampling temperature 0..2 (default: the daemon's, 1)"},
		&cli.FloatFlag{Name: "top-p", Value: -1, Usage: "nucleus mass 0..1"},
		&cli.Int64Flag{Name: "seed", Usage: "sampling seed (default: random)"},
		&cli.StringSliceFlag{Name: "stop", Usage: "stop sequence (repeatable, up to 4)"},
		jsonFlag,
	}
}

type genOpts struct {
	maxTok *int64
	temp   *float64
	topP   *float64
	seed   *int64
	stop   openai.StringList
}

func readGenOpts(cmd *cli.Command) (genOpts, error) {
	var o genOpts
	if cmd.IsSet("max-tokens") {
		v := int64(cmd.Int("max-tokens"))
		if v < 1 {
			return o, usagef("--max-tokens must be positive")
		}
		o.maxTok = &v
	}
	if cmd.IsSet("temperature") {
		v := cmd.Float("temperature")
		o.temp = &v
	}
	if cmd.IsSet("top-p") {
		v := cmd.Float("top-p")
		o.topP = &v
	}
	if cmd.IsSet("seed") {
		v := cmd.Int64("seed")
		o.seed = &v
	}
	o.stop = cmd.StringSlice("stop")
	return o, nil
}

func chatCommand() *cli.Command {
	return &cli.Command{
		Name:      "chat",
		Usage:     "chat with a model served by stratad (interactive on a terminal; otherwise one user turn per input line)",
		ArgsUsage: "[MESSAGE]",
		Flags: daemonFlags(append(genFlags(),
			&cli.StringFlag{Name: "system", Usage: "system message"},
		)...),
		Action: func(ctx context.Context, cmd *cli.Command) error {
			o, err := readGenOpts(cmd)
			if err != nil {
				return err
			}
			c := dial(cmd)
			model := cmd.String("model")
			if model == "" {
				if model, err = firstModel(ctx, c); err != nil {
					return err
				}
			}
			var history []openai.ChatMessage
			if s := cmd.String("system"); s != "" {
				history = append(history, openai.ChatMessage{Role: "system", Content: openai.Content(s)})
			}
			ch := &chatSession{c: c, model: model, o: o, json: cmd.Bool("json"), history: history}
			if cmd.NArg() > 0 {
				return ch.turn(ctx, strings.Join(cmd.Args().Slice(), " "))
			}
			interactive := term.IsTerminal(int(os.Stdin.Fd()))
			if interactive {
				fmt.Fprintf(os.Stderr, "chatting with %s on %s — empty line or Ctrl-D to end, /help for the commands\n", model, c.Target())
			}
			in := bufio.NewReader(os.Stdin)
			for {
				if interactive {
					fmt.Fprint(os.Stderr, "> ")
				}
				line, err := in.ReadString('\n')
				line = strings.TrimRight(line, "\r\n")
				if line == "" && (err != nil || interactive) {
					if errors.Is(err, io.EOF) || err == nil {
						return nil
					}
					return err
				}
				switch {
				case line == "/reset":
					ch.history = history
				case line == "/help":
					fmt.Fprintln(os.Stderr, chatHelp)
				case line != "":
					if terr := ch.turn(ctx, line); terr != nil {
						return terr
					}
				}
				if err != nil {
					if errors.Is(err, io.EOF) {
						return nil
					}
					return err
				}
			}
		},
	}
}

// chatHelp lists the interactive chat's commands.
const chatHelp = `commands:
  /help   this list
  /reset  forget the conversation so far (the system message stays)
  an empty line or Ctrl-D ends the chat; when the history outgrows the
  model's context, the oldest exchanges are dropped (and it says so)`

type chatSession struct {
	c       *client.Client
	model   string
	o       genOpts
	json    bool
	history []openai.ChatMessage
}

// turn sends one user message with the history so far, streams the reply
// to stdout (or prints the JSON response) and keeps it in the history.
//
// When the history has outgrown the model's context, the oldest exchange
// (after any system message) is dropped and the turn tried again, until it
// fits or only the new message is left: a long conversation goes on,
// forgetting its beginning, as chat front ends do.
func (s *chatSession) turn(ctx context.Context, msg string) error {
	for {
		err := s.try(ctx, msg)
		if !contextExceeded(err) {
			return err
		}
		if !s.forgetOldest() {
			return clientErr(err)
		}
		fmt.Fprintln(os.Stderr, "(the conversation outgrew the model's context: its oldest exchange is forgotten)")
	}
}

// contextExceeded reports whether err is the daemon's answer that the
// request does not fit the model's context.
func contextExceeded(err error) bool {
	var ae *client.APIError
	return errors.As(err, &ae) && ae.Code != nil && *ae.Code == "context_length_exceeded"
}

// forgetOldest drops the oldest non-system message and the replies that
// followed it up to the next user message; false when there is none.
func (s *chatSession) forgetOldest() bool {
	first := -1
	for i, m := range s.history {
		if m.Role != "system" {
			first = i
			break
		}
	}
	if first < 0 {
		return false
	}
	end := first + 1
	for end < len(s.history) && s.history[end].Role != "user" {
		end++
	}
	s.history = append(s.history[:first:first], s.history[end:]...)
	return true
}

// try is one attempt at a turn with the history as it stands.
func (s *chatSession) try(ctx context.Context, msg string) error {
	msgs := append(s.history[:len(s.history):len(s.history)], openai.ChatMessage{Role: "user", Content: openai.Content(msg)})
	req := openai.ChatRequest{Model: s.model, Messages: msgs, MaxTokens: s.o.maxTok, Temperature: s.o.temp, TopP: s.o.topP,
		Seed: s.o.seed, Stop: s.o.stop, Stream: !s.json}
	if !s.json {
		req.StreamOptions = &openai.StreamOptions{IncludeUsage: true}
	}
	out, err := s.c.Chat(ctx, req, func(ch openai.ChatChunk) error {
		for _, c := range ch.Choices {
			if c.Delta.Content != nil {
				if _, err := io.WriteString(os.Stdout, *c.Delta.Content); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if !s.json {
		fmt.Println()
	}
	if err != nil {
		if contextExceeded(err) {
			return err // turn decides: forget the oldest exchange or give up
		}
		return clientErr(err)
	}
	if s.json {
		if err := printJSON(out); err != nil {
			return err
		}
	}
	reply := ""
	if len(out.Choices) > 0 {
		reply = out.Choices[0].Message.Content
	}
	s.history = append(msgs, openai.ChatMessage{Role: "assistant", Content: openai.Content(reply)})
	return nil
}

func completeCommand() *cli.Command {
	return &cli.Command{
		Name:      "complete",
		Usage:     "continue a prompt with a model served by stratad (no chat template); the prompt is the arguments or stdin",
		ArgsUsage: "[PROMPT]",
		Flags: daemonFlags(append(genFlags(),
			&cli.IntFlag{Name: "logprobs", Usage: "also return this many top log probabilities per token (0-5; with --json)"},
		)...),
		Action: func(ctx context.Context, cmd *cli.Command) error {
			o, err := readGenOpts(cmd)
			if err != nil {
				return err
			}
			prompt := strings.Join(cmd.Args().Slice(), " ")
			if cmd.NArg() == 0 {
				b, err := io.ReadAll(os.Stdin)
				if err != nil {
					return err
				}
				prompt = string(b)
			}
			c := dial(cmd)
			model := cmd.String("model")
			if model == "" {
				if model, err = firstModel(ctx, c); err != nil {
					return err
				}
			}
			asJSON := cmd.Bool("json")
			req := openai.CompletionRequest{Model: model, Prompt: &openai.Prompt{Text: prompt}, MaxTokens: o.maxTok,
				Temperature: o.temp, TopP: o.topP, Seed: o.seed, Stop: o.stop, Stream: !asJSON}
			if cmd.IsSet("logprobs") {
				v := int64(cmd.Int("logprobs"))
				req.Logprobs = &v
			}
			out, err := c.Complete(ctx, req, func(ch openai.TextCompletion) error {
				for _, c := range ch.Choices {
					if _, err := io.WriteString(os.Stdout, c.Text); err != nil {
						return err
					}
				}
				return nil
			})
			if !asJSON {
				fmt.Println()
			}
			if err != nil {
				return clientErr(err)
			}
			if asJSON {
				return printJSON(out)
			}
			return nil
		},
	}
}
