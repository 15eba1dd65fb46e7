// Package provider is Meridian's Terraform provider: tenants, quotas, topics, service
// accounts, topic ACLs, members, lanes, mirror links, Databus configurations, Parquet
// exports and secondary indexes as resources, and regions, clusters and topics as data
// sources, all through the control plane's REST API (/api/v1/), like any other client.
package provider

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// Each environment variable is the one the meridian CLI reads for the same setting.
const (
	envEndpoint     = "MERIDIAN_API_URL"
	envToken        = "MERIDIAN_TOKEN"
	envClientID     = "MERIDIAN_CLIENT_ID"
	envClientSecret = "MERIDIAN_CLIENT_SECRET"
	envTokenURL     = "MERIDIAN_TOKEN_URL"
	envCACertFile   = "MERIDIAN_CA_CERT_FILE"
)

// New returns the provider factory for a version (set at build time).
func New(version string) func() provider.Provider {
	return func() provider.Provider {
		return &meridianProvider{version: version}
	}
}

type meridianProvider struct {
	version string
}

type providerModel struct {
	Endpoint        types.String `tfsdk:"endpoint"`
	Token           types.String `tfsdk:"token"`
	ClientID        types.String `tfsdk:"client_id"`
	ClientSecret    types.String `tfsdk:"client_secret"`
	TokenURL        types.String `tfsdk:"token_url"`
	CACertFile      types.String `tfsdk:"ca_cert_file"`
	RequestTimeoutS types.Int64  `tfsdk:"request_timeout_s"`
	WaitTimeoutS    types.Int64  `tfsdk:"wait_timeout_s"`
	InsecureHTTP    types.Bool   `tfsdk:"insecure_http"`
}

func (p *meridianProvider) Metadata(_ context.Context, _ provider.MetadataRequest, resp *provider.MetadataResponse) {
	resp.TypeName = "meridian"
	resp.Version = p.version
}

func (p *meridianProvider) Schema(_ context.Context, _ provider.SchemaRequest, resp *provider.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "Manages a Meridian control plane's tenants, topics, service accounts, ACLs, " +
			"members, quotas, lanes, mirror links, Databus configurations, exports and indexes " +
			"through its REST API. Authenticate with a bearer token, or with a service " +
			"account's client credentials (the provider gets and renews its tokens).",
		Attributes: map[string]schema.Attribute{
			"endpoint": schema.StringAttribute{
				Optional:    true,
				Description: "The control plane's base URL, e.g. `https://meridian.example.net` (`/api/v1` is added); `http://` only to a loopback host (`http://127.0.0.1:8000`) unless `insecure_http`. Default: `$MERIDIAN_API_URL`.",
			},
			"token": schema.StringAttribute{
				Optional:    true,
				Sensitive:   true,
				Description: "A bearer token (the local issuer's or Keycloak's). Default: `$MERIDIAN_TOKEN` when the block names no credentials. Conflicts with client credentials.",
			},
			"client_id": schema.StringAttribute{
				Optional:    true,
				Description: "A service account's client id (`<tenant>--<name>`), for the client-credentials grant. Default: `$MERIDIAN_CLIENT_ID` when the block names no credentials.",
			},
			"client_secret": schema.StringAttribute{
				Optional:    true,
				Sensitive:   true,
				Description: "The service account's secret. Default: `$MERIDIAN_CLIENT_SECRET` when the block names no credentials.",
			},
			"token_url": schema.StringAttribute{
				Optional:    true,
				Description: "Where client credentials are exchanged for a token. Default: `$MERIDIAN_TOKEN_URL`, else `<endpoint>/api/v1/auth/token` (the local issuer); with Keycloak, the realm's `.../protocol/openid-connect/token`.",
			},
			"ca_cert_file": schema.StringAttribute{
				Optional:    true,
				Description: "A PEM file of the CA that signed the control plane's (and the token endpoint's) certificate, when it is not a public one. Default: `$MERIDIAN_CA_CERT_FILE`.",
			},
			"request_timeout_s": schema.Int64Attribute{
				Optional:    true,
				Description: "How long one API request may take, in seconds (default 60).",
			},
			"wait_timeout_s": schema.Int64Attribute{
				Optional: true,
				Description: "How long a create, update or delete waits for the control plane to finish it (a topic on its brokers, " +
					"a tenant's identity, a mirror link's copies), in seconds (default 600). A create whose wait ends so (or at an " +
					"interrupt) keeps the object, with a warning: the next apply waits for it again.",
			},
			"insecure_http": schema.BoolAttribute{
				Optional: true,
				Description: "Allow an `http://` `endpoint` or `token_url` to a host other than loopback, on a network you trust: " +
					"the token or client secret then crosses it in the clear. Default false.",
			},
		},
	}
}

func (p *meridianProvider) Configure(ctx context.Context, req provider.ConfigureRequest, resp *provider.ConfigureResponse) {
	var config providerModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &config)...)
	if resp.Diagnostics.HasError() {
		return
	}
	for name, value := range map[string]types.String{
		"endpoint": config.Endpoint, "token": config.Token, "client_id": config.ClientID,
		"client_secret": config.ClientSecret, "token_url": config.TokenURL,
	} {
		if value.IsUnknown() {
			resp.Diagnostics.AddAttributeError(path.Root(name), "Unknown provider setting",
				"The provider needs "+name+" before planning: it cannot come from a resource not yet created.")
		}
	}
	if resp.Diagnostics.HasError() {
		return
	}
	cfg := ClientConfig{
		Endpoint:     orEnv(config.Endpoint, envEndpoint),
		TokenURL:     orEnv(config.TokenURL, envTokenURL),
		CACertFile:   orEnv(config.CACertFile, envCACertFile),
		UserAgent:    "terraform-provider-meridian/" + p.version,
		InsecureHTTP: config.InsecureHTTP.ValueBool(),
	}
	// The credentials come whole from the block when it names any, else from the
	// environment: a block with client credentials is not mixed with $MERIDIAN_TOKEN.
	if config.Token.IsNull() && config.ClientID.IsNull() && config.ClientSecret.IsNull() {
		cfg.Token = os.Getenv(envToken)
		cfg.ClientID = os.Getenv(envClientID)
		cfg.ClientSecret = os.Getenv(envClientSecret)
	} else {
		cfg.Token = config.Token.ValueString()
		cfg.ClientID = config.ClientID.ValueString()
		cfg.ClientSecret = config.ClientSecret.ValueString()
	}
	cfg.Timeout = seconds(config.RequestTimeoutS, "request_timeout_s", 3600, &resp.Diagnostics)
	cfg.WaitTimeout = seconds(config.WaitTimeoutS, "wait_timeout_s", 86400, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	if cfg.Endpoint == "" {
		resp.Diagnostics.AddAttributeError(path.Root("endpoint"), "Missing endpoint",
			"Set endpoint in the provider block or "+envEndpoint+", e.g. http://127.0.0.1:8000.")
		return
	}
	client, err := NewClient(cfg)
	if err != nil {
		resp.Diagnostics.AddError("Invalid provider configuration", err.Error())
		return
	}
	resp.ResourceData = client
	resp.DataSourceData = client
}

// seconds is a setting of 1 to most seconds as a duration (0: not set, the default); an
// attribute error outside that range.
func seconds(value types.Int64, name string, most int64, diags *diag.Diagnostics) time.Duration {
	if value.IsNull() {
		return 0
	}
	if n := value.ValueInt64(); n >= 1 && n <= most {
		return time.Duration(n) * time.Second
	}
	diags.AddAttributeError(path.Root(name), "Invalid provider setting", fmt.Sprintf("%s: from 1 to %d seconds", name, most))
	return 0
}

func orEnv(value types.String, name string) string {
	if !value.IsNull() {
		return value.ValueString()
	}
	return os.Getenv(name)
}

func (p *meridianProvider) Resources(_ context.Context) []func() resource.Resource {
	return []func() resource.Resource{
		newTenantResource,
		newQuotaResource,
		newTopicResource,
		newServiceAccountResource,
		newTopicACLResource,
		newMemberResource,
		newLaneResource,
		newMirrorResource,
		newDatabusConfigResource,
		newExportResource,
		newIndexResource,
	}
}

func (p *meridianProvider) DataSources(_ context.Context) []func() datasource.DataSource {
	return []func() datasource.DataSource{
		newRegionsDataSource,
		newClustersDataSource,
		newTopicsDataSource,
	}
}
