package provider

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"
)

// maxResponseBytes bounds what the provider reads of one answer: the API's largest
// (a page of 50 topics, a Databus document) is far below it.
const maxResponseBytes = 8 << 20

// tokenMargin is how long before its expiry a client-credentials token is renewed.
const tokenMargin = 30 * time.Second

// Client calls Meridian's REST API (/api/v1/) with a bearer token: a fixed one, or one
// obtained from a token endpoint with client credentials and renewed before it
// expires. It is safe for concurrent use (Terraform applies resources in parallel).
type Client struct {
	baseURL   string
	http      *http.Client
	userAgent string

	token string // a fixed token; empty with client credentials

	tokenURL     string
	clientID     string
	clientSecret string

	waitTimeout time.Duration

	mu        sync.Mutex
	cached    string
	expiresAt time.Time

	callerMu sync.Mutex
	caller   *callerJSON // who the credentials are (GET auth/whoami), read once
}

// ClientConfig is what the provider block (or the environment) gives.
type ClientConfig struct {
	Endpoint     string
	Token        string
	ClientID     string
	ClientSecret string
	TokenURL     string
	CACertFile   string
	Timeout      time.Duration
	WaitTimeout  time.Duration
	UserAgent    string
	// InsecureHTTP allows http:// to a host other than loopback: the credentials then
	// cross the network in the clear.
	InsecureHTTP bool
}

// defaultWaitTimeout bounds how long a create, update or delete waits for the control
// plane to finish it (a topic's partitions made on the brokers, a tenant's identity, a
// mirror link's workers stopped). Terraform's interrupt cancels the context sooner.
const defaultWaitTimeout = 10 * time.Minute

// NewClient checks the configuration (an http(s) endpoint with a host, http:// only to
// loopback unless InsecureHTTP; a token or a client id and secret, not both) and returns
// a client for it.
func NewClient(cfg ClientConfig) (*Client, error) {
	base, err := checkEndpoint(cfg.Endpoint, cfg.InsecureHTTP)
	if err != nil {
		return nil, err
	}
	hasCreds := cfg.ClientID != "" || cfg.ClientSecret != ""
	switch {
	case cfg.Token != "" && hasCreds:
		return nil, errors.New("give either a token or client credentials (client_id and client_secret), not both")
	case cfg.Token == "" && !hasCreds:
		return nil, errors.New("no credentials: set token (MERIDIAN_TOKEN) or client_id and client_secret (MERIDIAN_CLIENT_ID, MERIDIAN_CLIENT_SECRET)")
	case hasCreds && (cfg.ClientID == "" || cfg.ClientSecret == ""):
		return nil, errors.New("client credentials need both client_id and client_secret")
	}
	tokenURL := cfg.TokenURL
	if tokenURL == "" {
		tokenURL = base + "/api/v1/auth/token"
	} else if _, err := checkEndpoint(tokenURL, cfg.InsecureHTTP); err != nil {
		return nil, fmt.Errorf("token_url: %w", err)
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	if cfg.CACertFile != "" {
		pool, err := loadCA(cfg.CACertFile)
		if err != nil {
			return nil, err
		}
		transport.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = 60 * time.Second
	}
	waitTimeout := cfg.WaitTimeout
	if waitTimeout <= 0 {
		waitTimeout = defaultWaitTimeout
	}
	return &Client{
		waitTimeout:  waitTimeout,
		baseURL:      base,
		http:         &http.Client{Transport: transport, Timeout: timeout},
		userAgent:    cfg.UserAgent,
		token:        cfg.Token,
		tokenURL:     tokenURL,
		clientID:     cfg.ClientID,
		clientSecret: cfg.ClientSecret,
	}, nil
}

// checkEndpoint returns the URL without a trailing slash or /api/v1: an absolute http or
// https URL with a host, no query, fragment or credentials; http:// only to a loopback
// host unless insecureHTTP (tokens and client secrets would cross the network in the
// clear).
func checkEndpoint(raw string, insecureHTTP bool) (string, error) {
	parsed, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		return "", fmt.Errorf("not a URL: %q", raw)
	}
	if (parsed.Scheme != "http" && parsed.Scheme != "https") || parsed.Hostname() == "" {
		return "", fmt.Errorf("must be an http:// or https:// URL with a host, got %q", raw)
	}
	if parsed.User != nil || parsed.RawQuery != "" || parsed.Fragment != "" {
		return "", fmt.Errorf("must have no credentials, query or fragment: %q", raw)
	}
	if parsed.Scheme == "http" && !insecureHTTP && !isLoopback(parsed.Hostname()) {
		return "", fmt.Errorf("http:// sends the credentials in the clear: use https:// for %q "+
			"(http:// is for loopback hosts, or set insecure_http = true on a network you trust)", raw)
	}
	trimmed := strings.TrimRight(parsed.String(), "/")
	return strings.TrimSuffix(trimmed, "/api/v1"), nil
}

// isLoopback says whether host is this machine: localhost, or a loopback address.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func loadCA(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("ca_cert_file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("ca_cert_file %s holds no PEM certificate", path)
	}
	return pool, nil
}

// APIError is an answer other than 2xx, in the API's one error shape:
// {"error": {"code", "message", "details"}}.
type APIError struct {
	Method  string
	Path    string
	Status  int
	Code    string
	Message string
	Details map[string]any
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%s %s: %d %s: %s", e.Method, e.Path, e.Status, e.Code, e.Message)
}

// IsNotFound says whether err is the API's 404 (a missing object, or another tenant's).
func IsNotFound(err error) bool {
	var apiErr *APIError
	return errors.As(err, &apiErr) && apiErr.Status == http.StatusNotFound
}

// callerJSON is GET auth/whoami: who the credentials are.
type callerJSON struct {
	Name          string `json:"name"`
	PlatformAdmin bool   `json:"platform_admin"`
	Tenants       []struct {
		Slug string `json:"slug"`
	} `json:"tenants"`
}

// sees says whether the caller sees tenant's objects ("": its own only tenant).
func (c *callerJSON) sees(tenant string) bool {
	if c.PlatformAdmin || tenant == "" {
		return true
	}
	for _, t := range c.Tenants {
		if t.Slug == tenant {
			return true
		}
	}
	return false
}

// whoami is who the credentials are, asked once.
func (c *Client) whoami(ctx context.Context) (*callerJSON, error) {
	c.callerMu.Lock()
	defer c.callerMu.Unlock()
	if c.caller == nil {
		var caller callerJSON
		if err := c.Get(ctx, "auth/whoami", nil, &caller); err != nil {
			return nil, err
		}
		c.caller = &caller
	}
	return c.caller, nil
}

// Gone reads the outcome err of a read or a delete of an object of tenant ("": the
// caller's only one): true when the API answered 404 and the credentials see that
// tenant, so the object is gone; an error when they do not, since the API answers 404
// for another tenant's objects too (run with the wrong credentials, Terraform must not
// forget what it manages); otherwise err itself.
func (c *Client) Gone(ctx context.Context, err error, tenant string) (bool, error) {
	if !IsNotFound(err) {
		return false, err
	}
	// Not wrapped (%v): the diagnostic must say this, not only the API's answer.
	caller, whoErr := c.whoami(ctx)
	if whoErr != nil {
		return false, fmt.Errorf("%v, and who these credentials are could not be read (%v): "+
			"kept in the state", err, whoErr)
	}
	if caller.sees(tenant) {
		return true, nil
	}
	return false, fmt.Errorf("%v: these credentials (%s) are not of tenant %q, whose objects the API "+
		"answers as missing to them; it stays in the state. Use credentials of tenant %q or of a "+
		"platform administrator", err, caller.Name, tenant, tenant)
}

// Get, Post, Patch and Delete call path (relative to /api/v1/) and decode a JSON answer
// into out (nil: ignore the body).
func (c *Client) Get(ctx context.Context, path string, query url.Values, out any) error {
	return c.do(ctx, http.MethodGet, path, query, nil, out)
}

func (c *Client) Post(ctx context.Context, path string, body, out any) error {
	return c.do(ctx, http.MethodPost, path, nil, body, out)
}

func (c *Client) Patch(ctx context.Context, path string, query url.Values, body, out any) error {
	return c.do(ctx, http.MethodPatch, path, query, body, out)
}

func (c *Client) Put(ctx context.Context, path string, query url.Values, body, out any) error {
	return c.do(ctx, http.MethodPut, path, query, body, out)
}

func (c *Client) Delete(ctx context.Context, path string, query url.Values) error {
	return c.do(ctx, http.MethodDelete, path, query, nil, nil)
}

// List reads every page of a list (?limit=&offset=) into items.
func List[T any](ctx context.Context, c *Client, path string, query url.Values) ([]T, error) {
	var all []T
	params := url.Values{}
	for key, values := range query {
		params[key] = values
	}
	const pageSize = 200
	params.Set("limit", fmt.Sprint(pageSize))
	for offset := 0; ; offset += pageSize {
		params.Set("offset", fmt.Sprint(offset))
		var page struct {
			Count   int `json:"count"`
			Results []T `json:"results"`
		}
		if err := c.Get(ctx, path, params, &page); err != nil {
			return nil, err
		}
		all = append(all, page.Results...)
		if len(page.Results) == 0 || len(all) >= page.Count {
			return all, nil
		}
	}
}

// readAttempts is how often a read is tried when the control plane does not answer in
// time or answers 502/503/504 (a restart, a busy server); writes are tried once, since
// a write that timed out may have been applied.
const readAttempts = 3

func (c *Client) do(ctx context.Context, method, path string, query url.Values, body, out any) error {
	status, raw, err := c.send(ctx, method, path, query, body, false)
	if err == nil && status == http.StatusUnauthorized && c.token == "" {
		// A token the issuer revoked or that expired early: get a new one, once.
		status, raw, err = c.send(ctx, method, path, query, body, true)
	}
	for attempt := 1; method == http.MethodGet && attempt < readAttempts && transient(status, err); attempt++ {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s %s: %w", method, path, ctx.Err())
		case <-time.After(time.Duration(attempt) * time.Second):
		}
		status, raw, err = c.send(ctx, method, path, query, body, false)
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if status < 200 || status > 299 {
		return decodeError(method, path, status, raw)
	}
	if out == nil || len(raw) == 0 {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%s %s: the answer is not the JSON expected: %w", method, path, err)
	}
	return nil
}

func transient(status int, err error) bool {
	if err != nil {
		return true
	}
	return status == http.StatusBadGateway || status == http.StatusServiceUnavailable || status == http.StatusGatewayTimeout
}

func (c *Client) send(ctx context.Context, method, path string, query url.Values, body any, renew bool) (int, []byte, error) {
	token, err := c.bearer(ctx, renew)
	if err != nil {
		return 0, nil, err
	}
	target := c.baseURL + "/api/v1/" + strings.TrimLeft(path, "/")
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	var reader io.Reader
	if body != nil {
		encoded, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		reader = bytes.NewReader(encoded)
	}
	request, err := http.NewRequestWithContext(ctx, method, target, reader)
	if err != nil {
		return 0, nil, err
	}
	request.Header.Set("Authorization", "Bearer "+token)
	request.Header.Set("Accept", "application/json")
	request.Header.Set("User-Agent", c.userAgent)
	if body != nil {
		request.Header.Set("Content-Type", "application/json")
	}
	response, err := c.http.Do(request)
	if err != nil {
		return 0, nil, err
	}
	defer response.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(response.Body, maxResponseBytes+1))
	if err != nil {
		return 0, nil, err
	}
	if len(raw) > maxResponseBytes {
		return 0, nil, fmt.Errorf("the answer is over %d bytes", maxResponseBytes)
	}
	return response.StatusCode, raw, nil
}

func decodeError(method, path string, status int, raw []byte) error {
	var envelope struct {
		Error struct {
			Code    string         `json:"code"`
			Message string         `json:"message"`
			Details map[string]any `json:"details"`
		} `json:"error"`
	}
	apiErr := &APIError{Method: method, Path: path, Status: status}
	if json.Unmarshal(raw, &envelope) == nil && envelope.Error.Code != "" {
		apiErr.Code = envelope.Error.Code
		apiErr.Message = envelope.Error.Message
		apiErr.Details = envelope.Error.Details
		return apiErr
	}
	// Not the API's shape (a proxy's page, say): its start says what answered.
	apiErr.Code = http.StatusText(status)
	apiErr.Message = strings.TrimSpace(string(raw[:min(len(raw), 300)]))
	return apiErr
}

// bearer is the token to send: the fixed one, or a client-credentials token from the
// cache, renewed when it is close to expiry (or renew is set).
func (c *Client) bearer(ctx context.Context, renew bool) (string, error) {
	if c.token != "" {
		return c.token, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !renew && c.cached != "" && time.Now().Add(tokenMargin).Before(c.expiresAt) {
		return c.cached, nil
	}
	form := url.Values{"grant_type": {"client_credentials"}}
	request, err := http.NewRequestWithContext(ctx, http.MethodPost, c.tokenURL, strings.NewReader(form.Encode()))
	if err != nil {
		return "", err
	}
	request.SetBasicAuth(url.QueryEscape(c.clientID), url.QueryEscape(c.clientSecret))
	request.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	request.Header.Set("Accept", "application/json")
	request.Header.Set("User-Agent", c.userAgent)
	response, err := c.http.Do(request)
	if err != nil {
		return "", fmt.Errorf("token endpoint %s: %w", c.tokenURL, err)
	}
	defer response.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(response.Body, 1<<20))
	if err != nil {
		return "", fmt.Errorf("token endpoint %s: %w", c.tokenURL, err)
	}
	if response.StatusCode != http.StatusOK {
		return "", fmt.Errorf("token endpoint %s refused client %q: %w", c.tokenURL, c.clientID,
			decodeError(http.MethodPost, c.tokenURL, response.StatusCode, raw))
	}
	var answer struct {
		AccessToken string `json:"access_token"`
		ExpiresIn   int64  `json:"expires_in"`
	}
	if err := json.Unmarshal(raw, &answer); err != nil || answer.AccessToken == "" {
		return "", fmt.Errorf("token endpoint %s answered no access_token", c.tokenURL)
	}
	c.cached = answer.AccessToken
	c.expiresAt = time.Now().Add(time.Duration(answer.ExpiresIn) * time.Second)
	return c.cached, nil
}
